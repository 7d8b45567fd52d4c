"""The sweep's record makes the study and the tables agree: on resume
(:meth:`SweepRecord.open`) and at a sweep's end (:meth:`SweepRecord.settle`), with real
Optuna studies, real tables on disk and real records (no Ray)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.driver.record.study import open_study, recorded_trials
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.space.spec import FloatParam, Objective, Scheduler, Spec
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import write_tables

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPEC = Spec(name="t", trainable="digits", objective=Objective("val_loss", "min"),
            params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
            scheduler=Scheduler(type="asha", max_t=9, grace_period=1, reduction_factor=3))


def asked(study, trial_id, lr, reports=()):
    trial = study.ask()
    trial.suggest_float("lr", 1e-4, 1e-1, log=True) if lr is None else \
        trial.suggest_float("lr", lr, lr)
    trial.set_user_attr("trial_id", trial_id)
    for step, value in reports:
        trial.report(value, step)
    return trial


@pytest.fixture
def sweep(tmp_path):
    sweep = SweepDir.of(tmp_path / "t")
    sweep.path.mkdir()
    return sweep


def test_resume_ends_what_the_study_ended_and_continues_what_it_still_runs(sweep):
    """The driver was killed after the study knew that `done` completed and `pruned` was
    stopped, but before the tables said so; `running` was still training."""
    study = open_study(sweep, direction="minimize")[0]
    done = asked(study, "done", 0.01, [(1, 0.9), (9, 0.3)])
    done.set_user_attr("status", "completed")
    study.tell(done, 0.3)
    pruned = asked(study, "pruned", 0.02, [(1, 2.0)])
    pruned.set_user_attr("status", "stopped_by_asha")
    study.tell(pruned, state=TrialState.PRUNED)
    asked(study, "running", 0.03, [(1, 0.8), (2, 0.7)])
    tables = TrialRecords(SPEC)  # as last written: done and running started, no more
    tables.start("done", {"lr": 0.01})
    tables.start("running", {"lr": 0.03})
    write_tables(tables, sweep)

    record = SweepRecord.open(SPEC, sweep, {})
    unfinished, tables = record.unfinished, record.rows

    assert [t.trial_id for t in unfinished] == ["running"]
    assert unfinished[0].params == {"lr": 0.03} and unfinished[0].intermediate == {1: 0.8, 2: 0.7}
    done_row, pruned_row = tables.trials["done"], tables.trials["pruned"]
    assert (done_row["status"], done_row["final_value"], done_row["best_value"]) == (
        "completed", 0.3, 0.3)
    assert (pruned_row["status"], pruned_row["final_value"], pruned_row["lr"]) == (
        "stopped_by_asha", 2.0, 0.02)  # a row made from the study alone
    assert tables.trials["running"]["status"] == "running"
    assert tables.trials["running"]["optuna_trial"] == unfinished[0].number


def test_a_sweeps_end_stops_what_still_runs_and_gives_every_study_trial_a_row(sweep):
    record = SweepRecord(SPEC, sweep)
    study = record.open_study(directions=["minimize"])
    ran = asked(study, "ran", 0.01, [(1, 1.0)])
    asked(study, "pending", 0.02)  # asked; the time budget ended the sweep first
    record.start("ran", {"lr": 0.01})
    record.report("ran", {"epoch": 1, "val_loss": 1.0, "time_total_s": 1.0})
    records = record.rows
    told = record.settle()
    assert told == {ran.number: "PRUNED", ran.number + 1: "FAIL"}
    by_id = {t.trial_id: t for t in recorded_trials(study)}
    assert (by_id["ran"].state, by_id["ran"].status) == (TrialState.PRUNED, "stopped")
    assert (by_id["pending"].state, by_id["pending"].status) == (TrialState.FAIL, "stopped")
    assert records.trials["pending"]["status"] == "stopped"
    assert records.trials["pending"]["lr"] == 0.02
    assert records.trials["pending"]["optuna_trial"] == by_id["pending"].number
    assert record.settle() == {}  # settled once


def test_an_older_sweeps_sqlite_study_has_its_unlinked_running_trials_failed(tmp_path):
    sweep = SweepDir.of(tmp_path / "old")
    sweep.path.mkdir()
    study = optuna.create_study(study_name="old", storage=sweep.optuna_sqlite_url)
    study.tell(study.ask(), 1.0)
    study.ask()  # asked by a driver that then died, before trials carried a trial_id
    again, journal = open_study(sweep, create=False)
    assert journal is None  # SQLite writes through itself
    record = SweepRecord(SPEC, sweep)
    record.study = again
    assert record.settle() == {1: "FAIL"}
    states = [t.state for t in optuna.load_study(study_name="old",
                                                 storage=sweep.optuna_sqlite_url).trials]
    assert states == [TrialState.COMPLETE, TrialState.FAIL]


def test_a_resume_recovers_the_report_a_running_trial_checkpointed_after_the_driver_stopped(
        sweep):
    """Ctrl-C: the driver stopped listening after `run0` reported epoch 2, but the trial went
    on to checkpoint epoch 3 (its report written beside the checkpoint) before it was
    stopped. The resume continues from that checkpoint, so epoch 3's report comes from
    there: into the row, the history and the study, at its study step, once."""
    from hpsearch.driver.trials.checkpoints import CheckpointStore, note_report

    study = open_study(sweep, direction="minimize")[0]
    asked(study, "run0", 0.03, [(1, 0.8), (2, 0.7)])
    tables = TrialRecords(SPEC)
    tables.start("run0", {"lr": 0.03})
    for epoch, loss in ((1, 0.8), (2, 0.7)):
        tables.result("run0", {"epoch": epoch, "step": 10 * epoch, "val_loss": loss})
    write_tables(tables, sweep)
    store = CheckpointStore(sweep, "run0", keep=2)
    for epoch, loss in ((2, 0.7), (3, 0.6)):  # the harness's two newest checkpoints
        src = sweep.path / f"src{epoch}"
        src.mkdir()
        note_report(str(src), {"epoch": epoch, "step": 10 * epoch, "val_loss": loss,
                               "train_log": [{"step": 1}]})
        store.add(str(src), 10 * epoch)

    record = SweepRecord.open(SPEC, sweep, {})
    assert [h["epoch"] for h in record.rows.history] == [1, 2]  # nothing changed by opening
    record.open_study(directions=["minimize"])

    history = [(h["epoch"], h["val_loss"]) for h in record.rows.history]
    assert history == [(1, 0.8), (2, 0.7), (3, 0.6)]
    row = record.rows.trials["run0"]
    assert (row["status"], row["epochs"], row["best_value"]) == ("running", 3, 0.6)
    assert record.unfinished[0].intermediate == {1: 0.8, 2: 0.7, 3: 0.6}
    assert record.recorded[0].intermediate == {1: 0.8, 2: 0.7, 3: 0.6}  # ASHA seeds from it
    again = open_study(sweep, create=False)[0]  # the journal on disk has it too
    assert again.trials[0].intermediate_values == {1: 0.8, 2: 0.7, 3: 0.6}
    # Two checkpoints past the history (checkpoint_every 1, keep 2): both come back.
    study.tell(study.trials[0].number, state=TrialState.FAIL)  # (this study's trial ends)
    asked(study, "run1", 0.02, [(1, 0.9)])
    tables = record.rows
    tables.start("run1", {"lr": 0.02})
    tables.result("run1", {"epoch": 1, "step": 10, "val_loss": 0.9})
    write_tables(tables, sweep)
    store = CheckpointStore(sweep, "run1", keep=2)
    for epoch, loss in ((2, 0.85), (3, 0.8)):
        src = sweep.path / f"src1-{epoch}"
        src.mkdir()
        note_report(str(src), {"epoch": epoch, "step": 10 * epoch, "val_loss": loss})
        store.add(str(src), 10 * epoch)
    two = SweepRecord.open(SPEC, sweep, {})
    two.open_study(directions=["minimize"])
    assert [h["epoch"] for h in two.rows.history if h["trial_id"] == "run1"] == [1, 2, 3]
    assert [t.intermediate for t in two.unfinished] == [{1: 0.9, 2: 0.85, 3: 0.8}]
    # Opened again (a second resume), nothing is added twice.
    record = SweepRecord.open(SPEC, sweep, {})
    record.open_study(directions=["minimize"])
    assert [h["epoch"] for h in record.rows.history if h["trial_id"] == "run1"] == [1, 2, 3]
    assert [t.intermediate for t in record.unfinished] == [{1: 0.9, 2: 0.85, 3: 0.8}]


def test_a_resumed_run_has_its_own_manifest_entry_before_anything_notes_in_it(sweep):
    """`begin` on a resume: the run's entry is added first, so what is noted for this run
    (simulated GPUs) lands in it and not in the previous run's; one write."""
    from hpsearch.store.manifest import read_manifest

    manifest = {"name": "t", "status": "interrupted", "runs": [{"command": ["hpsearch", "run"]}]}
    record = SweepRecord(SPEC, sweep, manifest=manifest)
    record.begin(local_ray=[], plan={"slots": 2}, simulated_gpu=True)
    written = read_manifest(sweep)
    assert len(written["runs"]) == 2 and "simulated_gpu" not in written["runs"][0]
    assert written["runs"][1]["simulated_gpu"] is True and written["runs"][1]["driver_pid"]
    assert written["status"] == "running" and written["plan"] == {"slots": 2}
