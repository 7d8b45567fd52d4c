"""Sweeps survive a killed driver (SIGKILL in two crash windows, then `hpsearch resume`) and
a killed Ray Train worker: nothing finished is lost or run twice, and the trials running at
the kill continue from their checkpoints. A copy of a sweep resumes as itself."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import hpsearch
from hpsearch.store.layout import SweepDir

from .study_check import assert_study_matches_tables, open_study

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPACE = """\
    name: faults
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
      batch_size: 4
    search: {algorithm: tpe, seed: 2, n_startup_trials: 3}
    scheduler: {type: asha, time_attr: epoch, max_t: 9, grace_period: 1, reduction_factor: 3}
    trials: {num: 6, max_concurrent: 2}
    resources: {workers: 1}
"""


def newest_checkpoints(sweep: Path) -> dict[str, int]:
    """Each trial's newest complete checkpoint step, as on disk now."""
    out = {}
    for folder in (sweep / "checkpoints").glob("*"):
        steps = [int(p.name.split("_")[1]) for p in folder.glob("checkpoint_*")]
        if steps:
            out[folder.name] = max(steps)
    return out


def first_steps_of_run(sweep: Path, run: int) -> dict[str, int]:
    """Each trial's first reported step in run ``run`` of the sweep (Tune's per-run files;
    the history keeps each step once, so a restart from zero would not show there)."""
    import csv

    runs = SweepDir(sweep).tune_runs
    out = {}
    for progress in runs[run].glob("hpsearch_trial_*/progress.csv"):
        with open(progress) as f:
            rows = list(csv.DictReader(f))
        if rows:
            out[progress.parent.name.split("_")[2]] = int(rows[0]["step"])
    return out


def start_run(tmp_path: Path, env: dict | None = None) -> subprocess.Popen:
    space = tmp_path / "faults.yaml"
    space.write_text(textwrap.dedent(SPACE))
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(space)], cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def wait_until(predicate, timeout: float = 300, poll: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll)
    raise AssertionError("condition not reached in time")


def resume_and_check(tmp_path: Path, sweep: Path, finished_before, leftover_ray) -> None:
    resumed = subprocess.run(
        [sys.executable, "-m", "hpsearch", "resume", "faults"], cwd=tmp_path,
        capture_output=True, text=True, timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    trials = hpsearch.read_trials(sweep).set_index("trial_id")
    assert len(trials) == 6 and trials.index.is_unique
    # trials running at the kill were continued and ended as any trial does
    assert set(trials.status) <= {"completed", "stopped_by_asha"}, trials.status
    if finished_before is not None:
        for tid, row in finished_before.iterrows():  # ended before the kill: unchanged
            assert trials.loc[tid, "status"] == row.status
            assert trials.loc[tid, "final_value"] == row.final_value
    history = hpsearch.read_history(sweep)
    # (epoch too: a report recovered from the study has no step; docs/trial-tables.md)
    assert not history.duplicated(["trial_id", "step", "epoch"]).any()
    for _, epochs in history.groupby("trial_id").epoch:
        assert epochs.is_monotonic_increasing
    # each Tune trial told Optuna exactly once, as its row ended; no phantom trial
    assert_study_matches_tables(sweep, "faults", history_may_lag=True)
    assert not leftover_ray(), "resume left Ray processes behind"


def ended(df):
    return df[~df.status.isin(["running", "pending"])].set_index("trial_id")


def study_now(sweep: Path):
    """The sweep's study as the driver has written it so far (the journal is appended to
    at once: plain Optuna can read it while the driver runs)."""
    if not (sweep / "optuna.journal").exists():
        return None
    try:
        return open_study(sweep, "faults")
    except Exception:  # noqa: BLE001 - not created yet
        return None


def test_a_sweep_killed_twice_finishes_its_plan_its_trials_continue_and_a_copy_resumes(
        tmp_path, no_ray_running, leftover_ray):
    """Two SIGKILLs of the driver in one sweep's life, each in a crash window of its own:

    1. in the middle of its first write of the tables, before any trial has reported (a
       temporary file of the history, which is written first, is left; the trial table
       is not there yet);
    2. during the resumed run, once the study says two trials have ended and one is
       running with a checkpoint on disk.

    The second resume finishes the plan: nothing ended is lost or run twice, the study
    agrees with the tables, and the trial running at the second kill continues from its
    checkpoint. Then a copy of the finished sweep is resumed elsewhere with one trial
    more."""
    sweep = tmp_path / "runs" / "faults"
    first = start_run(tmp_path, env={"HPSEARCH_TEST_KILL_BEFORE_TABLE_REPLACE": "1"})
    first.wait(timeout=300)
    assert first.returncode == -signal.SIGKILL
    left = [p.name for p in sweep.rglob(".*.tmp-*")]
    assert left and not (sweep / "trials.parquet").exists(), "the kill did not land mid-write"
    assert not (sweep / "history.parquet").exists() or hpsearch.read_history(sweep).empty

    resumed = subprocess.Popen([sys.executable, "-m", "hpsearch", "resume", "faults"],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    moment = {}
    try:
        def two_ended_one_running_with_a_checkpoint():
            study = study_now(sweep)
            if study is None:
                return False
            states = [t.state.name for t in study.trials]
            if states.count("RUNNING") == 0 and len(states) == 6:
                raise AssertionError("the sweep ended before the kill: lengthen its trials")
            running = {t.user_attrs["trial_id"] for t in study.trials
                       if t.state.name == "RUNNING" and t.intermediate_values}
            moment.update(saved={t: s for t, s in newest_checkpoints(sweep).items()
                                 if t in running})
            return len(states) - states.count("RUNNING") >= 2 and bool(moment["saved"])

        wait_until(two_ended_one_running_with_a_checkpoint, poll=0.1)
        resumed.send_signal(signal.SIGKILL)
        resumed.wait(timeout=30)
    finally:
        resumed.kill()
    before = hpsearch.read_trials(sweep)  # the tables as the killed driver last wrote them
    study = open_study(sweep, "faults")
    running = {t.user_attrs["trial_id"] for t in study.trials if t.state.name == "RUNNING"}
    checkpointed = {t: s for t, s in newest_checkpoints(sweep).items() if t in running}
    assert checkpointed, (moment, running)
    resume_and_check(tmp_path, sweep, ended(before), leftover_ray)
    # Each trial that was running and had a checkpoint continued from it: its first step
    # in the last run is one epoch past a checkpoint at least as new as at the kill.
    per_epoch = int(hpsearch.read_history(sweep).query("epoch == 1").step.iloc[0])
    continued = first_steps_of_run(sweep, -1)
    for trial_id, step in checkpointed.items():
        assert trial_id in continued, (trial_id, continued)
        assert continued[trial_id] >= step + per_epoch, (trial_id, continued[trial_id], step)
        assert continued[trial_id] % per_epoch == 0  # from a checkpoint at an epoch's end

    # A copy of the finished sweep, resumed elsewhere with one trial more, runs as itself
    # and leaves the original untouched. Two slots are free: Tune asks for two trials
    # within one step, and the second must be refused (hpsearch once ran both).
    copy = tmp_path / "elsewhere" / "faults-copy"
    shutil.copytree(sweep, copy, symlinks=True)
    original = snapshot(sweep)
    more = subprocess.run(
        [sys.executable, "-m", "hpsearch", "resume", "faults-copy", "--trials", "7",
         "--storage", str(copy.parent)], cwd=tmp_path, capture_output=True, text=True,
        timeout=600)
    assert more.returncode == 0, more.stdout + more.stderr
    assert snapshot(sweep) == original  # not a byte of the original changed
    trials = hpsearch.read_trials(copy)
    assert len(trials) == 7 and trials.trial_id.is_unique, trials
    assert set(hpsearch.read_trials(sweep).trial_id) < set(trials.trial_id)
    # The copy's history lags its study where the original's did (the reports lost at the
    # kills between two checkpoints of a running trial).
    assert_study_matches_tables(copy, "faults", history_may_lag=True)
    assert not leftover_ray()


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` and its content's hash."""
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


WORKER_SPACE = """\
    name: workerkill
    trainable: held:WORKLOAD
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
      batch_size: 4
    search: {algorithm: random, seed: 0}
    scheduler: {type: fifo, time_attr: epoch, max_t: 10}
    trials: {num: 1, max_failures: 2}
    resources: {workers: 2}
"""


#: digits, whose workers slow to 50 ms a batch after their first two epochs until the test
#: opens the gate: the kill lands mid-training however fast or loaded the machine. (Plain
#: digits trains its ten epochs in 2-3 s, and once all ten were reported before the test's
#: kill arrived.) A restarted worker counts from zero and finds the gate open.
HELD = """\
import time
from pathlib import Path

from hpsearch.train import Workload, cross_entropy
from hpsearch.workloads import digits

GATE = Path({gate!r})
HELD_AFTER = 2 * 359  # two epochs of a worker (359 steps an epoch at batch size 4)
_batches = 0


def loss(model, batch):
    global _batches
    _batches += 1
    if _batches > HELD_AFTER and not GATE.exists():
        time.sleep(0.05)
    return cross_entropy(model, batch)


WORKLOAD = Workload(build_model=digits.build_model, build_data=digits.build_data, loss=loss)
"""


def train_workers(cluster) -> list[int]:
    """The Ray Train worker processes of ``cluster`` (the session's own, on which this
    test's sweep is the only one running): this sweep's, whatever else runs on the
    machine."""
    ours = set(cluster.processes())
    return [int(pid) for pid in subprocess.run(["pgrep", "-f", "RayTrainWorker"],
                                               capture_output=True, text=True).stdout.split()
            if int(pid) in ours]


def test_killed_train_worker_restarts_from_the_latest_checkpoint(tmp_path, session_ray):
    import csv

    space = tmp_path / "w.yaml"
    space.write_text(textwrap.dedent(WORKER_SPACE))
    gate = tmp_path / "gate-open"
    (tmp_path / "held.py").write_text(HELD.format(gate=str(gate)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(space)], cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sweep = tmp_path / "runs" / "workerkill"

    def progress_rows():
        files = list(sweep.glob("tune-*/hpsearch_trial_*/progress.csv"))
        if not files:
            return []
        with open(files[0]) as f:
            return list(csv.DictReader(f))

    try:
        wait_until(lambda: len(progress_rows()) >= 2, poll=0.1)
        workers = train_workers(session_ray)
        assert len(workers) == 2, f"this trial's two Ray Train workers, found {workers}"
        os.kill(workers[-1], signal.SIGKILL)
        reported_before = len(progress_rows())
        gate.touch()  # the restarted trial trains at full speed
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    trials = hpsearch.read_trials(sweep)
    assert list(trials.status) == ["completed"]
    steps = [int(r["step"]) for r in progress_rows()]
    epochs = [float(r["epoch"]) for r in progress_rows()]
    # Every report Tune received, restart included: no step was trained twice and none was
    # skipped, so the first step after the restart followed the checkpoint's step.
    assert epochs == list(range(1, 11)), epochs
    per_epoch = steps[0]
    assert steps == [per_epoch * e for e in range(1, 11)]
    assert reported_before < 10
