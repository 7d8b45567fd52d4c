"""The study journal and what it records: study steps, outcomes, the journal's flushes,
and the record a resume reads back. Nothing here starts Ray."""

from __future__ import annotations

import math
import os

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.driver.record.study import (
    check_sweep_study,
    open_study,
    recorded_trials,
    study_outcome,
    study_step,
)
from hpsearch.errors import DamagedSweepError
from hpsearch.store.layout import SweepDir

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("t, reported, step", [
    (0.5, [], 0),             # before the first rung: floor
    (1.0, [0], 1),            # the first report at rung 1
    (1.5, [0, 1], 1),         # same floor as the rung: the caller skips it
    (2.0, [0, 1], 2),
    (3.4, [0, 1, 2], 3),      # first past rung 3: stored at 3
    (9.0, [3, 8], 9),         # max_t is a milestone too
])
def test_study_step_is_the_epoch_and_snaps_the_first_report_past_each_milestone(t, reported, step):
    assert study_step(t, (1, 3, 9), reported) == step


def test_study_step_in_seconds_puts_every_rung_decision_at_its_rung():
    # a slow trial reports at 17 s, 41 s: ASHA judged it at rungs 10 and 30 on those reports
    assert study_step(17.0, (10, 30, 90), [4]) == 10
    assert study_step(41.0, (10, 30, 90), [4, 10]) == 30
    assert study_step(44.0, (10, 30, 90), [4, 10, 30]) == 44


@pytest.mark.parametrize("status, value, reports, expected", [
    ("completed", 0.3, True, (TrialState.COMPLETE, 0.3)),
    ("completed", math.inf, True, (TrialState.FAIL, None)),
    ("stopped_by_asha", 0.9, True, (TrialState.PRUNED, None)),
    ("stopped", 0.9, True, (TrialState.PRUNED, None)),
    ("stopped", None, False, (TrialState.FAIL, None)),
    ("diverged", math.inf, True, (TrialState.FAIL, None)),
    ("unsupported_precision", math.inf, True, (TrialState.FAIL, None)),
    ("failed", None, True, (TrialState.FAIL, None)),
])
def test_each_trial_table_status_has_one_study_state(status, value, reports, expected):
    assert study_outcome(status, value=value, has_reports=reports) == expected


def test_appends_reach_the_file_at_once_and_the_disk_only_when_the_sweep_says(tmp_path,
                                                                             monkeypatch):
    """Every journal append is in the file when the call returns (another reader sees a
    running trial's reports); ``fsync`` happens only at :meth:`SweepJournal.sync`, which
    the searcher calls where a trial ends and the tables writer before each write."""
    sweep = SweepDir.of(tmp_path)
    study, journal = open_study(sweep, direction="minimize")  # flushed once, created
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    trial = study.ask()
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    trial.set_user_attr("trial_id", "abc")
    for step in range(3):
        trial.report(1.0 / (step + 1), step)
    assert synced == []
    seen = optuna.load_study(study_name=sweep.name, storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(sweep.optuna)))).trials[0]
    assert seen.intermediate_values == {0: 1.0, 1: 0.5, 2: 1 / 3}
    assert seen.user_attrs == {"trial_id": "abc"} and "lr" in seen.params
    study.tell(trial, 0.25)
    journal.sync()
    assert len(synced) == 1 and journal.syncs == 2


def test_the_record_lists_the_sweeps_own_trials_not_warm_start_imports(tmp_path):
    sweep = SweepDir.of(tmp_path)
    study, _ = open_study(sweep, direction="minimize")
    dist = optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)
    study.add_trial(optuna.trial.create_trial(state=TrialState.COMPLETE, value=0.5,
                                              params={"lr": 0.01}, distributions={"lr": dist},
                                              user_attrs={"warm_start": "night1/x"}))
    study.enqueue_trial({"lr": 0.02})
    ran = study.ask()  # takes the enqueued one
    assert ran.suggest_float("lr", 1e-3, 1e-1, log=True) == 0.02
    ran.set_user_attr("trial_id", "t1")
    ran.report(0.4, 1)
    ended = study.ask()
    ended.suggest_float("lr", 1e-3, 1e-1, log=True)
    ended.set_user_attr("trial_id", "t2")
    ended.set_user_attr("status", "completed")
    study.tell(ended, 0.3)
    got = recorded_trials(study)
    assert [(t.trial_id, t.state, t.status) for t in got] == [
        ("t1", TrialState.RUNNING, None), ("t2", TrialState.COMPLETE, "completed")]
    assert got[0].intermediate == {1: 0.4} and got[0].params == {"lr": 0.02}
    assert got[1].value == 0.3 and got[1].ended and not got[0].ended


def test_a_study_that_lacks_the_tables_trials_is_refused_before_anything_changes(tmp_path):
    sweep = SweepDir.of(tmp_path)
    study, _ = open_study(sweep, direction="minimize")
    study.ask()
    assert check_sweep_study(sweep, [0]) is not None
    with pytest.raises(DamagedSweepError, match="holds 1 trial"):
        check_sweep_study(sweep, [0, 1])
    sweep.optuna.write_text('{"op_code": 0, "worker_id": "x", "study_name": ')
    with pytest.raises(DamagedSweepError, match="--warm-start"):
        check_sweep_study(sweep, [0])


def test_a_journal_append_the_disk_cannot_take_leaves_no_half_line(tmp_path):
    """A real full disk (a small tmpfs): the append raises, the file is as it was, the
    study reads back whole, and appends go on once space is freed."""
    import errno

    from small_disk import fill, free, small_disk

    with small_disk(tmp_path / "disk", size_mb=1) as disk:
        sweep = SweepDir(disk / "s")
        sweep.path.mkdir()
        study, journal = open_study(sweep)
        study.ask().set_user_attr("trial_id", "a")
        journal.sync()
        fill(disk, leave=8192)
        trial = study.ask()  # a few hundred bytes: they fit
        before = sweep.optuna.read_bytes()
        with pytest.raises(OSError) as err:
            trial.set_user_attr("note", "x" * 50_000)
        assert err.value.errno == errno.ENOSPC
        assert sweep.optuna.read_bytes() == before  # whole lines only
        free(disk)
        study.ask().set_user_attr("trial_id", "c")
        again, _ = open_study(sweep, create=False)
        assert [t.user_attrs.get("trial_id") for t in again.get_trials()][-1] == "c"


def test_the_driver_cuts_a_partial_last_line_before_it_appends(tmp_path):
    """A line an older writer left half written (a power cut, a full disk) would glue
    onto the next append and make the journal unreadable: the driver cuts it first."""
    sweep = SweepDir(tmp_path)
    study, journal = open_study(sweep)
    study.ask().set_user_attr("trial_id", "a")
    whole = sweep.optuna.read_bytes()
    with open(sweep.optuna, "ab") as f:
        f.write(b'{"op_code": 5, "worker_id": "x", "trial_id": 1, "us')
    study, journal = open_study(sweep)  # the driver's open
    assert sweep.optuna.read_bytes() == whole
    study.ask().set_user_attr("trial_id", "b")
    again, _ = open_study(sweep, create=False)
    assert [t.user_attrs["trial_id"] for t in again.get_trials()] == ["a", "b"]


def test_a_sweep_whose_disk_filled_before_its_study_was_written_can_resume(tmp_path):
    sweep = SweepDir(tmp_path)
    sweep.optuna.write_bytes(b'{"op_code": 0, "worker_id": "w", "study_na')  # no whole line
    assert check_sweep_study(sweep, linked=[]) is None  # nothing to lose: resumable
    with pytest.raises(DamagedSweepError, match="holds no study"):
        check_sweep_study(sweep, linked=[0])
