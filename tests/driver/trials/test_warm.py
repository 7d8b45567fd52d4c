"""Warm worker groups (hpsearch/driver/trials/warm.py, pool.py): multi-worker harness
trials that reuse their DDP workers, trial after trial, without anything of one trial
reaching the next (a whole warm sweep: tests/driver/sweep/test_sweep_ray.py)."""

from __future__ import annotations

import pytest

from hpsearch.space import parse_space


def warm_space(**over) -> dict:
    space = {
        "name": "warm",
        "trainable": "digits",
        "objective": {"metric": "val_loss", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 1e-3, "high": 3e-2, "log": True},
                   "batch_size": 64},
        "search": {"algorithm": "random", "seed": 3},
        "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": 2, "grace_period": 1,
                      "reduction_factor": 2},
        "trials": {"num": 3, "max_concurrent": 1},
        "resources": {"workers": 2},
    }
    space.update(over)
    return space


def test_multi_worker_harness_trials_run_warm_unless_told_not_to():
    from hpsearch.driver.trials.resolve import resolve_runner
    from hpsearch.driver.trials.runners import TrainRunner
    from hpsearch.driver.trials.warm import WarmRunner

    assert type(resolve_runner(parse_space(warm_space()))) is WarmRunner
    cold = warm_space(resources={"workers": 2, "warm_workers": False})
    assert type(resolve_runner(parse_space(cold))) is TrainRunner
    raw = warm_space(trainable="tests.driver.trials.raw_loops:reports_each_epoch")
    assert type(resolve_runner(parse_space(raw))) is TrainRunner  # calls ray.train itself


def test_the_collective_timeout_reaches_every_ray_train_process_group(tmp_path):
    """Cold and warm trials both build their trainer here; Ray's default was 1800 s."""
    from ray.train import RunConfig

    from hpsearch.driver.trials.resolve import resolve_runner

    run_config = RunConfig(name="t", storage_path=str(tmp_path))
    for resources in ({"workers": 2}, {"workers": 2, "warm_workers": False},
                      {"workers": 2, "collective_timeout": "90s"}):
        runner = resolve_runner(parse_space(warm_space(resources=resources)))
        trainer = runner.trainer(lambda config: None, {}, run_config=run_config)
        expected = 90 if "collective_timeout" in resources else 600
        assert trainer.backend_config.timeout_s == expected


class _Host:
    """Stands in for a group's host actor: records what the pool asks of it."""

    def __init__(self, log: list, name: str):
        self.shutdown = _Call(log, name, "shutdown")
        self.stop_trial = _Call(log, name, "stop_trial")


class _Call:
    def __init__(self, log: list, name: str, what: str):
        self.log, self.name, self.what = log, name, what

    def remote(self, *args):
        self.log.append((self.what, self.name))


def test_a_pool_whose_share_shrinks_shuts_idle_groups_now_and_busy_ones_when_free():
    from hpsearch.driver.trials.pool import WarmPool

    log: list = []
    pool = WarmPool(runner=None, sweep=None, limit=3)
    pool.groups = {n: _Host(log, n) for n in ("g0", "g1", "g2")}
    pool.busy = {"g0": "t0", "g1": "t1"}
    pool.set_limit(1)  # the ledger gave the slots to another sweep
    assert log == [("shutdown", "g2")] and set(pool.groups) == {"g0", "g1"}
    pool.release("t1")  # its trial ended: over the limit, so it goes too
    assert ("stop_trial", "g1") in log and ("shutdown", "g1") in log
    assert set(pool.groups) == {"g0"}
    pool.set_limit(0)
    assert set(pool.groups) == {"g0"}  # busy: it finishes its trial first
    pool.release("t0")
    assert pool.groups == {} and pool.size() == {"groups": 0, "busy": 0, "limit": 0}


@pytest.mark.ray
@pytest.mark.slow
def test_a_trial_that_gets_no_worker_group_in_time_fails_in_one_line(ray_instance, monkeypatch):
    """A pool held at a share of 0 (another sweep took the cluster and never gave it back)
    answers every acquire with 'not now': the trial fails after the timeout, saying why,
    instead of waiting for good."""
    from hpsearch.driver.trials.pool import WarmPool
    from hpsearch.driver.trials.warm import ACQUIRE_TIMEOUT_ENV, _acquire
    from hpsearch.errors import TrainableError

    monkeypatch.setenv(ACQUIRE_TIMEOUT_ENV, "1")
    pool = ray_instance.remote(num_cpus=0)(WarmPool).remote(None, None, 0)
    try:
        with pytest.raises(TrainableError) as failed:
            _acquire(pool, "t1")
        assert str(failed.value).splitlines() == [str(failed.value)]
        assert "no warm worker group became free for trial t1 in 1 s" in str(failed.value)
    finally:
        ray_instance.kill(pool)
