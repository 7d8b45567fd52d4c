"""The full-disk watch: what counts as a full disk's error, the paused trials, and the
stopper and searcher acting on it. No Ray: a trial here is what the watch reads of Tune's
(its ids and its error file)."""

from __future__ import annotations

import errno
from types import SimpleNamespace

import optuna

from hpsearch.driver.monitor.disk import DiskWatch
from hpsearch.driver.monitor.stops import SweepStopper
from hpsearch.driver.search.ids import TRIAL_ID_KEY
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.searcher import SweepSearcher
from hpsearch.space import load_space
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords

RAY_ERROR = """Failure # 1 (occurred at 2026-12-02_06-40-12)
ray::ImplicitFunc.train() (pid=6157, ip=10.0.0.2)
  File "hpsearch/driver/trials/checkpoints.py", line 36, in add
    shutil.move(src, tmp)
shutil.Error: [('/tmp/hpsearch-ckpt-kgd70b1s/checkpoint.pt', '/runs/s/checkpoints/5c8b8010/.tmp-6157-176/checkpoint.pt', "[Errno 28] No space left on device")]
"""


def tune_trial(tmp_path, tune_id, trial_id, error=None):
    path = None
    if error is not None:
        path = tmp_path / f"{tune_id}-error.txt"
        path.write_text(error)
    return SimpleNamespace(trial_id=tune_id, config={TRIAL_ID_KEY: trial_id},
                           error_file=str(path) if path else None)


def test_a_trial_whose_checkpoint_met_a_full_disk_is_paused_and_the_sweep_stops(tmp_path):
    said = []
    watch = DiskWatch(SweepDir(tmp_path / "s"), say=said.append)
    stopper = SweepStopper(TrialRecords(load_space("search_spaces/quickstart.yaml")),
                           all_failed_after=3, disk=watch)
    watch.on_trial_start(0, [], tune_trial(tmp_path, "t1", "aaa", error=RAY_ERROR))
    watch.on_trial_start(0, [], tune_trial(tmp_path, "t2", "bbb", error="ValueError: bad lr"))
    assert not stopper.stop_all()
    assert not watch.pauses("bbb") and not watch.full  # its own code's error
    assert watch.pauses("aaa") and watch.paused == {"aaa"}
    assert stopper.stop_all() and stopper.reason == "disk_full"
    watch.note("writing the trial tables", OSError(errno.ENOSPC, "No space left on device"))
    assert len(said) == 1 and "is full (writing trial aaa's files)" in said[0]


def test_a_write_of_the_drivers_that_meets_a_full_disk_counts_and_others_do_not(tmp_path):
    watch = DiskWatch(SweepDir(tmp_path))
    assert not watch.note("writing the study journal", PermissionError(errno.EACCES, "no"))
    assert not watch.full
    assert watch.note("writing the study journal", OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert watch.full and watch.evidence == "writing the study journal"


def test_the_record_leaves_a_paused_trial_running_in_the_study_and_its_row(tmp_path):
    """The disk watch is a watcher of the sweep's record: the trial whose checkpoint met a
    full disk is neither told to the study nor ended in the rows; one whose code failed
    is. Without the watcher attached, both fail."""
    spec = load_space("search_spaces/quickstart.yaml")
    record = SweepRecord.in_memory(spec)
    study = record.open_study(directions=["minimize"])
    records = record.rows
    watch = DiskWatch(SweepDir(tmp_path))
    record.watch(watch)
    admission = SimpleNamespace(decide=lambda **kw: "start", planned=8)
    searcher = SweepSearcher(record, admission=admission)
    for tune_id, error in (("t1", RAY_ERROR), ("t2", "RuntimeError: a bug")):
        config = searcher.suggest(tune_id)
        watch.on_trial_start(0, [], tune_trial(tmp_path, tune_id, config[TRIAL_ID_KEY], error))
        records.start(config[TRIAL_ID_KEY], config)
        searcher.on_trial_complete(tune_id, error=True)
    paused, failed = study.trials
    assert paused.state == optuna.trial.TrialState.RUNNING  # resume continues it
    assert failed.state == optuna.trial.TrialState.FAIL
    assert records.trials[paused.user_attrs["trial_id"]].get("status") != "failed"
    assert records.trials[failed.user_attrs["trial_id"]]["status"] == "failed"


def test_the_free_space_poll_counts_a_nearly_full_disk_as_full(tmp_path):
    """Tune's step end looks at the free space: a real small disk, filled to less than
    ``NEARLY_FULL`` free, is full before any write fails; a disk with room is not."""
    from small_disk import fill, free, small_disk

    from hpsearch.driver.monitor.disk import NEARLY_FULL

    with small_disk(tmp_path / "disk", size_mb=2) as disk:
        said = []
        watch = DiskWatch(SweepDir(disk / "s"), say=said.append, every_s=0.0)
        watch.on_step_end(0, [])
        assert not watch.full and not said
        fill(disk, leave=NEARLY_FULL // 4)
        try:
            watch.on_step_end(1, [])
            assert watch.full and watch.evidence.endswith(" free")
            assert len(said) == 1 and "is full (" in said[0]
        finally:
            free(disk)


def test_the_free_space_poll_reads_the_sweeps_own_disk_at_most_every_every_s(tmp_path,
                                                                           monkeypatch):
    """With a threshold above the sweep disk's real free space (read with statvfs), the
    poll counts it as full; below it, never; and between two looks less than ``every_s``
    apart, it does not read the disk again."""
    import hpsearch.driver.monitor.disk as disk_module
    from hpsearch.store.layout import free_bytes

    free_now = free_bytes(tmp_path)
    assert free_now is not None and free_now > 0
    monkeypatch.setattr(disk_module, "NEARLY_FULL", 0)
    watch = DiskWatch(SweepDir(tmp_path / "s"), every_s=3600.0)
    watch.on_step_end(0, [])  # the first look reads the disk: room
    assert not watch.full
    monkeypatch.setattr(disk_module, "NEARLY_FULL", free_now + 2**40)
    watch.on_step_end(1, [])  # an hour has not passed: not read again
    assert not watch.full
    watch.every_s = 0.0
    watch.on_step_end(2, [])
    assert watch.full and watch.evidence.endswith(" free")


def test_a_trial_the_full_disk_paused_is_not_said_as_a_retry_and_another_failure_is(tmp_path):
    """Tune retries both; the disk watch says the full disk once and pauses its trial, and
    the progress line says the other's retry (the callbacks in the run's order)."""
    import io

    from hpsearch.driver.monitor.plugins import Monitors

    out = io.StringIO()
    record = SweepRecord(load_space("search_spaces/quickstart.yaml"), SweepDir(tmp_path / "s"))
    monitors = Monitors(record, SimpleNamespace(), SimpleNamespace(), deadline_at=None,
                        stream=out)
    watchers = [cb for cb in monitors.callbacks() if cb in (monitors.disk, monitors.progress)]
    assert watchers == [monitors.disk, monitors.progress]
    for trial in (tune_trial(tmp_path, "t1", "aaa", error=RAY_ERROR),
                  tune_trial(tmp_path, "t2", "bbb", error="ValueError: bad lr")):
        monitors.disk.on_trial_start(0, [], trial)
        for callback in watchers:
            callback.on_trial_recover(0, [], trial)
    said = out.getvalue()
    assert said.count("is full (writing trial aaa's files)") == 1, said
    assert "aaa failed" not in said and "trial bbb failed, trying again: ValueError: bad lr" in said
