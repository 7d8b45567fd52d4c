"""Multi-worker (Ray Train) trials on the shared local Ray instance: a trial that worked is
never called failed, and every way a trial ends gives its resources back."""

from __future__ import annotations

import time

import pytest

import hpsearch
from hpsearch.driver.sweep import run_sweep
from hpsearch.space import parse_space

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def raw_space(loop: str, *, scheduler: dict, num: int = 2, **fixed) -> dict:
    return {
        "name": loop.replace("_", "-"),
        "trainable": f"tests.driver.raw_loops:{loop}",
        "objective": {"metric": "val_mse", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}, **fixed},
        "search": {"algorithm": "random", "seed": 0},
        "scheduler": scheduler,
        "trials": {"num": num, "max_failures": 0},
        "resources": {"workers": 2},
    }


def resources_return_to_baseline(ray, timeout: float = 30.0) -> None:
    from ray.util import placement_group_table

    total = ray.cluster_resources()
    deadline = time.monotonic() + timeout
    while True:
        groups = [g for g in placement_group_table().values() if g["state"] != "REMOVED"]
        free = ray.available_resources()
        if not groups and free.get("CPU") == total.get("CPU"):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"resources not given back: free {free} of {total}, "
                                 f"groups {[(g['name'], g['state']) for g in groups]}")
        time.sleep(0.5)


def test_raw_loop_without_checkpoints_completes_under_fifo(tmp_path, ray_instance):
    spec = parse_space(raw_space("reports_each_epoch",
                                 scheduler={"type": "fifo", "max_t": 3}))
    result = run_sweep(spec, storage=str(tmp_path))
    trials = hpsearch.read_trials(result.sweep_dir)
    assert result.status == "finished", trials[["status", "error"]]
    assert list(trials.status) == ["completed", "completed"]
    history = hpsearch.read_history(result.sweep_dir)
    assert sorted(history.groupby("trial_id").epoch.max()) == [3, 3]
    assert trials.best_value.notna().all()
    resources_return_to_baseline(ray_instance)


def test_raw_loop_that_returns_before_max_t_under_asha_is_completed(tmp_path, ray_instance):
    spec = parse_space(raw_space(
        "reports_each_epoch", stop_after=2,
        scheduler={"type": "asha", "max_t": 4, "grace_period": 1, "reduction_factor": 2}))
    result = run_sweep(spec, storage=str(tmp_path))
    trials = hpsearch.read_trials(result.sweep_dir)
    assert result.status == "finished"
    # Each trial either ran its 2 epochs and returned (completed) or ASHA stopped it at 1.
    assert set(trials.status) <= {"completed", "stopped_by_asha"}
    assert (trials[trials.epochs == 2].status == "completed").all()
    assert (trials[trials.epochs == 1].status == "stopped_by_asha").all()
    assert "failed" not in set(trials.status)


def test_raw_loop_that_never_reports_the_objective_fails_with_what_it_reported(
        tmp_path, ray_instance):
    spec = parse_space(raw_space("reports_other_metrics", num=1,
                                 scheduler={"type": "fifo", "max_t": 2}))
    result = run_sweep(spec, storage=str(tmp_path))
    trials = hpsearch.read_trials(result.sweep_dir)
    assert list(trials.status) == ["failed"]
    assert "never reported the objective metric 'val_mse'; it reported: mse" in trials.error[0]
    assert result.status in ("all_failed", "no_trial_completed")
