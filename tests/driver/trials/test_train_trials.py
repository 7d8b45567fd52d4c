"""Multi-worker (Ray Train) trials on the shared local Ray instance: a trial that worked is
never called failed, and every way a trial ends gives its resources back."""

from __future__ import annotations

import time

import pytest

import hpsearch
from hpsearch.driver.sweep.run import run_sweep
from hpsearch.space import parse_space

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def raw_space(loop: str, *, scheduler: dict, num: int = 2, workers: int = 1, **fixed) -> dict:
    """A sweep of a raw Ray Train loop: every trial is a Ray Train run (one worker unless
    the test is about several, so that two trials fit on 2 CPUs at once)."""
    return {
        "name": loop.replace("_", "-"),
        "trainable": f"tests.driver.trials.raw_loops:{loop}",
        "objective": {"metric": "val_mse", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}, **fixed},
        "search": {"algorithm": "random", "seed": 0},
        "scheduler": scheduler,
        "trials": {"num": num, "max_failures": 0},
        "resources": {"workers": workers},
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


def wait_until_dead(class_name: str, timeout: float = 30.0) -> None:
    """Until Ray's state API shows an actor of ``class_name`` dead (``ray.kill`` returns at
    once; a method called to find out could still run on the actor)."""
    from ray.util.state import list_actors

    deadline = time.monotonic() + timeout
    while not any(a.class_name.endswith(class_name) for a in
                  list_actors(filters=[("state", "=", "DEAD")], limit=1000)):
        assert time.monotonic() < deadline, f"no {class_name} actor died in {timeout} s"
        time.sleep(0.2)


def test_raw_loops_without_checkpoints_complete_or_are_stopped_as_they_really_ended(
        tmp_path, ray_instance):
    """Raw Ray Train loops that report each epoch and save no checkpoint, under ASHA: some
    return by themselves after 3 epochs (``stop_after``), before ``max_t``, and are
    ``completed``, not taken for stopped ones; others run to ``max_t``; ASHA stops the
    weak ones at a rung. Every trial gives its resources back. (3 is not a rung: at a
    rung, ASHA may stop a trial at the very report it returns after, which of the two
    came first then depends on which other trial reached the rung first.)"""
    space = raw_space("reports_each_epoch", num=3,
                      scheduler={"type": "asha", "max_t": 4, "grace_period": 1,
                                 "reduction_factor": 2})
    space["params"]["stop_after"] = {"type": "categorical", "choices": [3, 4]}
    result = run_sweep(parse_space(space), storage=str(tmp_path))
    trials = hpsearch.read_trials(result.sweep_dir)
    assert result.status == "finished", trials[["status", "error"]]
    assert set(trials.status) <= {"completed", "stopped_by_asha"}, trials[["status", "error"]]
    returned = trials.epochs == trials.stop_after.clip(upper=4)
    assert (trials[returned].status == "completed").all(), trials
    assert (trials[~returned].status == "stopped_by_asha").all(), trials
    assert (trials.status == "completed").any() and trials.best_value.notna().all()
    history = hpsearch.read_history(result.sweep_dir)
    assert dict(history.groupby("trial_id").epoch.max()) == dict(zip(trials.trial_id,
                                                                    trials.epochs))
    resources_return_to_baseline(ray_instance)


def test_raw_loop_that_never_reports_the_objective_fails_with_what_it_reported(
        tmp_path, ray_instance):
    spec = parse_space(raw_space("reports_other_metrics", num=1,
                                 scheduler={"type": "fifo", "max_t": 2}))
    result = run_sweep(spec, storage=str(tmp_path))
    trials = hpsearch.read_trials(result.sweep_dir)
    assert list(trials.status) == ["failed"]
    assert "never reported the objective metric 'val_mse'; it reported: mse" in trials.error[0]
    assert result.status in ("all_failed", "no_trial_completed")


@pytest.mark.parametrize("loop, max_failures, fragment", [
    ("raises_after_one_report", 0, "user code failed after its first report"),
    # dies on every attempt, past max_failures: Ray Train's error and what it is about
    ("worker_dies_before_reporting", 1, "ControllerError: Training failed due to controller "
                                        "error: The actor died unexpectedly"),
])
def test_a_failing_train_trial_fails_and_gives_its_resources_back(tmp_path, ray_instance,
                                                                  loop, max_failures, fragment):
    space = raw_space(loop, num=1, scheduler={"type": "fifo", "max_t": 2},
                      workers=2 if loop == "worker_dies_before_reporting" else 1)
    space["trials"]["max_failures"] = max_failures
    result = run_sweep(parse_space(space), storage=str(tmp_path))
    trials = hpsearch.read_trials(result.sweep_dir)
    assert list(trials.status) == ["failed"]
    assert fragment in trials.error[0]
    resources_return_to_baseline(ray_instance, timeout=15)


def test_orphaned_placement_groups_of_a_dead_creator_are_removed(ray_instance):
    """What a Ray Train controller leaves when its worker group fails during setup: a
    placement group whose creator died while the sweep (the job) lives on."""
    from ray.util import placement_group_table

    from hpsearch.driver.internals import reap_orphan_placement_groups

    @ray_instance.remote(num_cpus=0)
    class Creator:
        def make(self):
            from ray.util import placement_group

            group = placement_group([{"CPU": 1}])
            ray_instance.get(group.ready(), timeout=30)
            return group.id.hex()

    creator = Creator.remote()
    group_id = ray_instance.get(creator.make.remote())
    ray_instance.kill(creator)
    wait_until_dead("Creator")
    assert placement_group_table()[group_id]["state"] == "CREATED"  # Ray keeps it
    assert group_id in reap_orphan_placement_groups()
    resources_return_to_baseline(ray_instance, timeout=15)


def test_trial_with_workers_returns_a_raw_loops_reports_without_checkpoints(tmp_path,
                                                                            ray_instance):
    from hpsearch.driver.trials.single import run_single, single_config

    spec = parse_space(raw_space("reports_each_epoch", scheduler={"type": "fifo", "max_t": 3},
                                 workers=2))
    seen = []
    reports = run_single(spec, single_config(spec)[0], workers=2, on_report=seen.append)
    assert [r["epoch"] for r in reports] == [1, 2, 3]
    assert [r["epoch"] for r in seen] == [1, 2, 3] and "val_mse" in reports[-1]


def test_a_sweep_waiting_for_resources_that_never_come_says_why_and_stops(
        tmp_path, ray_instance, monkeypatch, capsys):
    """Something outside the sweep holds every CPU: the sweep names what it waits for and
    what holds it, then stops with its tables written instead of hanging."""
    from ray.util import placement_group, remove_placement_group

    from hpsearch.errors import SweepStalledError

    monkeypatch.setenv("HPSEARCH_STALL_WARN_S", "4")
    monkeypatch.setenv("HPSEARCH_STALL_FAIL_S", "12")
    hog = placement_group([{"CPU": 1}, {"CPU": 1}], name="someone-elses-job")
    ray_instance.get(hog.ready(), timeout=30)
    try:
        spec = parse_space({
            "name": "starved", "trainable": "digits",
            "objective": {"metric": "val_loss", "mode": "min"},
            "params": {"lr": {"type": "float", "low": 0.001, "high": 0.01, "log": True}},
            "scheduler": {"type": "fifo", "max_t": 1}, "trials": {"num": 2},
        })
        start = time.monotonic()
        with pytest.raises(SweepStalledError) as err:
            run_sweep(spec, storage=str(tmp_path))
        assert time.monotonic() - start < 60
    finally:
        remove_placement_group(hog)
    message = str(err.value)
    assert "wait for 2 CPU" in message and "someone-elses-job (2 CPU)" in message
    assert "waiting" in capsys.readouterr().out  # the warning came first
    manifest = (tmp_path / "starved" / "manifest.json").read_text()
    assert '"status": "stalled"' in manifest
    resources_return_to_baseline(ray_instance, timeout=15)
