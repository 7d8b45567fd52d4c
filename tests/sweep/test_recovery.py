"""Resume repairs, driven with real ASHA, Optuna and processes (no Ray cluster)."""

from __future__ import annotations

import random
import subprocess
import sys
from types import SimpleNamespace

import optuna
import pytest

from hpsearch.recovery import (
    fail_orphaned_optuna_trials,
    pid_alive,
    replay_asha_rungs,
    stop_orphaned_local_ray,
    this_machine,
)
from hpsearch.space.spec import FloatParam, Objective, Scheduler, Spec
from hpsearch.translate import make_scheduler


def make_spec(mode: str) -> Spec:
    return Spec(
        name="t", trainable="digits", objective=Objective("val_loss", mode),
        params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
        scheduler=Scheduler(type="asha", max_t=9, grace_period=1, reduction_factor=3),
    )


def curves(seed: int, n: int = 12):
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        start = rng.uniform(1, 3)
        out[f"t{i}"] = [start / (1 + 0.3 * e * rng.uniform(0.5, 1.5)) for e in range(1, 10)]
    return out


def drive(scheduler, trials, values, mode):
    """Run trials through ASHA as Tune would; return the history rows and decisions."""
    history, decisions = [], {}
    sign = 1 if mode == "min" else -1
    for tid in trials:
        trial = SimpleNamespace(trial_id=tid)
        scheduler.on_trial_add(None, trial)
        for epoch, loss in enumerate(values[tid], start=1):
            result = {"epoch": epoch, "step": 10 * epoch, "val_loss": sign * loss}
            history.append({"trial_id": tid, **result})
            action = scheduler.on_trial_result(None, trial, result)
            if action == "STOP":
                scheduler.on_trial_complete(None, trial, result)
                decisions[tid] = epoch
                break
    return history, decisions


def rungs(scheduler):
    return [(m, dict(r)) for m, r in scheduler._brackets[0]._rungs]


@pytest.mark.parametrize("mode", ["min", "max"])
def test_replayed_asha_makes_the_same_decisions_as_the_uninterrupted_one(mode):
    spec = make_spec(mode)
    values = curves(seed=1)
    ids = list(values)
    first, rest = ids[:7], ids[7:]

    original = make_scheduler(spec)
    history, _ = drive(original, first, values, mode)
    _, expected = drive(original, rest, values, mode)  # the run that never crashed

    resumed = make_scheduler(spec)  # what Tuner.restore gives back: empty rungs
    assert replay_asha_rungs(resumed, history, spec) == len(history)
    _, decisions = drive(resumed, rest, values, mode)
    assert decisions == expected
    assert any(epoch < 9 for epoch in expected.values())  # ASHA did stop some


def test_without_replay_asha_would_decide_differently():
    spec = make_spec("min")
    values = curves(seed=1)
    ids = list(values)
    original = make_scheduler(spec)
    drive(original, ids[:7], values, "min")
    _, expected = drive(original, ids[7:], values, "min")
    _, empty = drive(make_scheduler(spec), ids[7:], values, "min")
    assert empty != expected  # so the replay test above is not vacuous


def test_orphaned_running_optuna_trials_are_failed(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="s", storage=url)
    done = study.ask()
    study.tell(done, 1.0)
    study.ask()  # asked by a driver that then died
    assert fail_orphaned_optuna_trials(url, "s") == 1
    states = [t.state for t in optuna.load_study(study_name="s", storage=url).trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]


def test_orphaned_ray_daemons_of_a_dead_driver_are_stopped():
    # A stand-in daemon whose command line says "ray", as Ray's own daemons' do.
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    dead_driver = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_driver.wait()
    try:
        manifest = {"runs": [{"driver_pid": dead_driver.pid, "local_ray_pids": [daemon.pid],
                              "machine": this_machine()}]}
        assert stop_orphaned_local_ray(manifest, grace_s=5) == [daemon.pid]
        daemon.wait(timeout=10)
        assert not pid_alive(daemon.pid)
    finally:
        daemon.kill()


def test_daemons_of_a_live_driver_are_left_alone():
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    try:
        manifest = {"runs": [{"driver_pid": daemon.pid, "local_ray_pids": [daemon.pid],
                              "machine": this_machine()}]}
        assert stop_orphaned_local_ray(manifest) == []
        # Nor are pids recorded on another machine (or before a reboot).
        elsewhere = {"runs": [{"driver_pid": 1 << 22, "local_ray_pids": [daemon.pid],
                               "machine": {"hostname": "other", "boot_id": "x"}}]}
        assert stop_orphaned_local_ray(elsewhere) == []
        assert daemon.poll() is None
    finally:
        daemon.kill()


def test_checkpoint_store_keeps_the_newest_and_resumes_from_the_last_whole_one(tmp_path):
    from hpsearch.trial import CheckpointStore

    store = CheckpointStore(str(tmp_path / "t1"), keep=2)
    assert store.latest() is None
    for step in (10, 20, 30):
        src = tmp_path / f"src{step}"
        src.mkdir()
        (src / "checkpoint.pt").write_text(str(step))
        store.add(str(src), step)
        assert not src.exists()  # the store owns it now
    assert [p.rsplit("_", 1)[1] for p in store.all()] == ["000000020", "000000030"]
    # A copy a killed process never finished stays out of sight.
    (tmp_path / "t1" / ".tmp-999-40").mkdir()
    assert open(f"{store.latest()}/checkpoint.pt").read() == "30"
    # Step 100 sorts after step 30: names are zero-padded.
    src = tmp_path / "src100"
    src.mkdir()
    store.add(str(src), 100)
    assert store.latest().endswith("checkpoint_000000100")
