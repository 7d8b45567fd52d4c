"""TablesCallback's write budget: trial ends are written at once while writing is cheap,
and gathered when trials end faster than the tables can be written (no Ray needed: the
callback is fed Tune's events by hand, with real records and real files)."""

import time
from types import SimpleNamespace

import pytest

from hpsearch.driver.callbacks import TablesCallback
from hpsearch.space.spec import CategoricalParam, FloatParam, Objective, Scheduler, Spec
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import read_history, read_trials


def make_spec():
    return Spec(
        name="t", trainable="digits", objective=Objective("val_loss", "min"),
        params=(FloatParam("lr", 1e-4, 1e-1, log=True),
                CategoricalParam("precision", ("fp32", "bf16"))),
        fixed={"batch_size": 64},
        scheduler=Scheduler(type="asha", max_t=4, grace_period=1, reduction_factor=2),
    )


def _trial(tid):
    return SimpleNamespace(trial_id=tid, config={"lr": 0.01, "precision": "fp32"},
                           checkpoint=None)


def _run_trial(cb, tid, epochs=4):
    trial = _trial(tid)
    cb.on_trial_start(0, [], trial)
    for e in range(1, epochs + 1):
        cb.on_trial_result(0, [], trial, {"epoch": e, "step": e, "val_loss": 1.0 / e,
                                          "training_iteration": e, "time_total_s": 0.1 * e})
    cb.on_trial_complete(0, [], trial)


def _ended_on_disk(sweep):
    table = read_trials(sweep.path)
    return set(table.loc[table.status == "completed", "trial_id"])


@pytest.fixture
def sweep(tmp_path):
    s = SweepDir.at(tmp_path, "t")
    s.path.mkdir(parents=True)
    return s


def test_every_end_written_at_once_while_writing_is_cheap(sweep):
    cb = TablesCallback(TrialRecords(make_spec()), sweep)
    for i in range(5):
        _run_trial(cb, f"t{i}")
        assert _ended_on_disk(sweep) == {f"t{j}" for j in range(i + 1)}
    assert cb.held_ends == 0
    assert len(read_history(sweep.path)) == 20


def test_ends_gathered_when_the_budget_is_spent_and_written_within_max_delay(sweep):
    # No budget at all: every end waits for max_delay_s, then one write takes them all.
    cb = TablesCallback(TrialRecords(make_spec()), sweep, write_share=1e-9, burst_s=0.0,
                        max_delay_s=0.3)
    _run_trial(cb, "a")
    _run_trial(cb, "b")
    cb.on_step_end(0, [])
    assert _ended_on_disk(sweep) == set()  # held: neither end is on disk yet
    assert len(cb.held) == 2
    time.sleep(0.35)
    writes = cb.writes
    cb.on_step_end(0, [])
    assert _ended_on_disk(sweep) == {"a", "b"}
    assert cb.writes == writes + 1 and cb.held_ends == 2 and not cb.held


def test_a_flood_of_ends_costs_about_the_write_share(sweep):
    # 200 trial ends as fast as the driver can feed them: with a 5% share and a small
    # burst, far fewer writes than ends, and the experiment's end writes every one.
    records = TrialRecords(make_spec())
    cb = TablesCallback(records, sweep, write_share=0.05, burst_s=0.02, max_delay_s=60)
    for i in range(200):
        _run_trial(cb, f"t{i:03d}", epochs=1)
        cb.on_step_end(0, [])
    assert cb.writes < 100, cb.writes
    cb.on_experiment_end([])
    assert len(_ended_on_disk(sweep)) == 200 and not cb.held
    assert cb.held_ends > 100


def test_held_end_is_written_once_the_budget_refills(sweep):
    cb = TablesCallback(TrialRecords(make_spec()), sweep, write_share=0.05, burst_s=0.001,
                        max_delay_s=60)
    _run_trial(cb, "a")
    assert cb.held
    cb.write_share = 1e6  # the budget refills at once
    cb.on_step_end(0, [])
    assert _ended_on_disk(sweep) == {"a"} and not cb.held


def test_resume_ends_rows_whose_end_only_tune_saved(sweep):
    # The killed driver held back the end of "a" (not in the tables) after Tune had saved
    # its state with "a" TERMINATED: the resumed run's first step ends the row from Tune's
    # last result, so the trial is neither left unfinished nor run again.
    before = TablesCallback(TrialRecords(make_spec()), sweep)
    trial = _trial("a")
    before.on_trial_start(0, [], trial)
    for e in (1, 2, 3):
        before.on_trial_result(0, [], trial, {"epoch": e, "step": e, "val_loss": 1.0 / e,
                                              "training_iteration": e})
    before.flush(force=True)
    assert read_trials(sweep.path).status.tolist() == ["running"]

    from hpsearch.store.tables import load_tables

    records = TrialRecords(make_spec())
    records.load(*load_tables(sweep))
    after = TablesCallback(records, sweep)
    last = {"epoch": 4, "step": 4, "val_loss": 0.2, "training_iteration": 4}
    tune_trials = [SimpleNamespace(trial_id="a", status="TERMINATED", last_result=last,
                                   checkpoint=None, error_file=None),
                   SimpleNamespace(trial_id="b", status="PENDING", last_result={},
                                   checkpoint=None, error_file=None)]
    after.on_trial_start(0, [], _trial("b"))
    after.on_step_begin(0, tune_trials)
    row = records.trials["a"]
    assert row["status"] == "completed" and row["final_value"] == 0.2
    assert records.trials["b"]["status"] == "running"
    after.on_experiment_end([])
    table = read_trials(sweep.path).set_index("trial_id")
    assert table.loc["a", "status"] == "completed"
    assert len(read_history(sweep.path).query("trial_id == 'a'")) == 4
