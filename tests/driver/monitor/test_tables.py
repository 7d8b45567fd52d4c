"""The tables callback: Tune's events into the sweep's record, the record onto disk every
few seconds and at the end, each write after the study's journal is flushed (no Ray
needed: the callback is fed Tune's events by hand, with a real record and real files)."""

from types import SimpleNamespace

import pytest

from hpsearch.driver.monitor.tables import TablesCallback, last_error_line
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.ids import TRIAL_ID_KEY
from hpsearch.space.spec import CategoricalParam, FloatParam, Objective, Scheduler, Spec
from hpsearch.store.layout import SweepDir
from hpsearch.store.tables import read_history, read_trials


def make_spec():
    return Spec(
        name="t", trainable="digits", objective=Objective("val_loss", "min"),
        params=(FloatParam("lr", 1e-4, 1e-1, log=True),
                CategoricalParam("precision", ("fp32", "bf16"))),
        fixed={"batch_size": 64},
        scheduler=Scheduler(type="asha", max_t=4, grace_period=1, reduction_factor=2),
    )


def trial(hid, tune_id=None):
    return SimpleNamespace(trial_id=tune_id or hid, checkpoint=None, error_file=None,
                           config={"lr": 0.01, "precision": "fp32", TRIAL_ID_KEY: hid})


def run_trial(cb, t, epochs=4):
    cb.on_trial_start(0, [], t)
    for e in range(1, epochs + 1):
        cb.on_trial_result(0, [], t, {"epoch": e, "step": e, "val_loss": 1.0 / e,
                                      "training_iteration": e, "time_total_s": 0.1 * e})
    cb.record.rows.end(t.config[TRIAL_ID_KEY], returned=True)  # as the searcher ends it
    cb.on_trial_complete(0, [], t)


class Journal:
    def __init__(self, log):
        self.log = log

    def sync(self):
        self.log.append("sync")


@pytest.fixture
def sweep(tmp_path):
    s = SweepDir.at(tmp_path, "t")
    s.path.mkdir(parents=True)
    return s


def test_rows_are_keyed_by_the_hpsearch_id_whatever_tune_calls_the_trial(sweep):
    cb = TablesCallback(SweepRecord(make_spec(), sweep))
    run_trial(cb, trial("b", tune_id="9a8b7c6d"))  # a continued trial under a new Tune id
    cb.on_experiment_end([])
    table = read_trials(sweep.path)
    assert list(table.trial_id) == ["b"] and list(table.status) == ["completed"]
    assert "hpsearch_trial_id" not in table.columns  # the key is not a parameter
    assert set(read_history(sweep.path).trial_id) == {"b"}


def test_writes_come_at_most_every_interval_and_always_at_the_end(sweep, monkeypatch):
    now = [100.0]
    monkeypatch.setattr("hpsearch.driver.record.sweep_record.time.monotonic", lambda: now[0])
    log = []
    record = SweepRecord(make_spec(), sweep, interval_s=2.0)
    record.journal = Journal(log)
    cb = TablesCallback(record)
    run_trial(cb, trial("a"))
    cb.on_step_end(0, [])
    assert cb.record.writes == 1 and set(read_trials(sweep.path).trial_id) == {"a"}
    run_trial(cb, trial("b"))
    cb.on_step_end(0, [])
    assert cb.record.writes == 1  # within 2 s of the last write
    now[0] += 2.5
    cb.on_step_end(0, [])
    assert cb.record.writes == 2 and set(read_trials(sweep.path).trial_id) == {"a", "b"}
    cb.on_step_end(0, [])
    now[0] += 5
    cb.on_step_end(0, [])
    assert cb.record.writes == 2  # nothing changed: nothing written
    run_trial(cb, trial("c"))
    cb.on_experiment_end([])
    assert cb.record.writes == 3 and len(read_trials(sweep.path)) == 3
    assert log == ["sync"] * 3  # the journal flushed before every write


def test_a_failed_trial_keeps_the_last_line_of_its_error(sweep, tmp_path):
    cb = TablesCallback(SweepRecord(make_spec(), sweep))
    t = trial("e")
    error = tmp_path / "error.txt"
    error.write_text('Traceback (most recent call last):\n  File "x.py", line 1\n'
                     "ValueError: the loss was a string\n")
    t.error_file = str(error)
    cb.on_trial_start(0, [], t)
    cb.record.rows.end("e", errored=True)  # as the searcher ends it
    cb.on_trial_error(0, [], t)
    row = cb.record.rows.trials["e"]
    assert row["status"] == "failed" and row["error"] == "ValueError: the loss was a string"
    error.write_text("ray.train.ControllerError: Training failed due to controller error:\n"
                     "The actor died unexpectedly before finishing this task.\n"
                     "\tclass_name: RayTrainWorker\n")
    assert last_error_line(t) == ("ray.train.ControllerError: Training failed due to "
                                  "controller error: The actor died unexpectedly before "
                                  "finishing this task.")


def test_a_write_that_fails_is_kept_and_cleared_by_the_next_one(sweep):
    record = SweepRecord(make_spec(), sweep)
    cb = TablesCallback(record)
    run_trial(cb, trial("a"))
    sweep.trials.mkdir()  # a directory where the table's file goes: the rename fails
    record.flush(force=True)
    assert record.storage_error is not None and "trials.parquet" in str(record.storage_error)
    sweep.trials.rmdir()
    run_trial(cb, trial("b"))
    record.flush(force=True)
    assert record.storage_error is None and len(read_trials(sweep.path)) == 2
