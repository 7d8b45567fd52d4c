"""Resume repairs, driven with real ASHA, Optuna and processes (no Ray cluster)."""

from __future__ import annotations

import random
import subprocess
import sys
from types import SimpleNamespace

import optuna
import pytest

from hpsearch.driver.repairs import (
    replay_asha_rungs,
    settle_study,
    stop_orphaned_local_ray,
)
from hpsearch.driver.search import make_scheduler
from hpsearch.space.spec import FloatParam, Objective, Scheduler, Spec
from hpsearch.store.procs import alive as pid_alive
from hpsearch.store.procs import identify, this_machine


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


def test_an_older_sweeps_sqlite_study_has_its_orphaned_trials_failed(tmp_path):
    from hpsearch.store.layout import SweepDir
    from hpsearch.store.records import TrialRecords

    sweep = SweepDir.of(tmp_path / "old")
    sweep.path.mkdir()
    study = optuna.create_study(study_name="old", storage=sweep.optuna_sqlite_url)
    done = study.ask()
    study.tell(done, 1.0)
    study.ask()  # asked by a driver that then died, before trials carried a trial_id
    assert settle_study(sweep, TrialRecords(make_spec("min"))) == {1: "FAIL"}
    states = [t.state for t in optuna.load_study(study_name="old",
                                                 storage=sweep.optuna_sqlite_url).trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]


def _run_record(driver, local_ray, machine=None):
    return {"runs": [{"driver": driver, "local_ray": local_ray,
                      "machine": machine or this_machine()}]}


def test_orphaned_ray_daemons_of_a_dead_driver_are_stopped():
    # A stand-in daemon whose command line says "ray", as Ray's own daemons' do.
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    dead_driver = subprocess.Popen([sys.executable, "-c", "pass"])
    recorded_driver = identify(dead_driver.pid)
    dead_driver.wait()
    try:
        manifest = _run_record(recorded_driver, [identify(daemon.pid)])
        assert stop_orphaned_local_ray(manifest, grace_s=5) == [daemon.pid]
        daemon.wait(timeout=10)
        assert not pid_alive(daemon.pid)
    finally:
        daemon.kill()


def test_daemons_of_a_live_driver_are_left_alone():
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    try:
        me = identify(daemon.pid)
        assert stop_orphaned_local_ray(_run_record(me, [me])) == []
        # Nor are pids recorded on another machine (or before a reboot).
        elsewhere = _run_record({"pid": 1 << 22, "start": 1}, [me],
                                machine={"hostname": "other", "boot_id": "x"})
        assert stop_orphaned_local_ray(elsewhere) == []
        assert daemon.poll() is None
    finally:
        daemon.kill()


def test_a_reused_pid_is_never_killed():
    """The recorded pid now belongs to another process (pids are reused within a boot):
    its start time differs, so neither it nor its children are touched."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    try:
        now = identify(other.pid)
        recorded = {"pid": other.pid, "start": now["start"] - 1}  # an earlier process
        manifest = _run_record({"pid": 1 << 22, "start": 1}, [recorded])
        assert stop_orphaned_local_ray(manifest, grace_s=1) == []
        assert other.poll() is None
    finally:
        other.kill()


def test_a_searcher_pickled_before_driver_budget_existed_finds_its_may_start_hook():
    # Sweeps started before hpsearch.driver.budget (optuna.db sweeps among them) pickled
    # functools.partial(hpsearch.driver.repairs.may_start_trial, sweep, num).
    import functools
    import pickle

    from hpsearch.driver import repairs

    hook = pickle.loads(pickle.dumps(functools.partial(repairs.may_start_trial, "/x", 4)))
    assert hook(trial_id="t1") is True  # no live driver here: nothing limits it
