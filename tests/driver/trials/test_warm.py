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


def group_host(**resources):
    from hpsearch.driver.trials.pool import GroupHost
    from hpsearch.driver.trials.resolve import resolve_runner

    runner = resolve_runner(parse_space(warm_space(
        resources={"workers": 2, **resources}, trials={"num": 3, "max_concurrent": 1,
                                                       "max_failures": 5})))
    return GroupHost(runner, sweep=None, name="warm-0")


def test_a_group_whose_first_collective_fails_twice_fails_its_trial_and_is_given_up():
    host = group_host()
    seq = host.assign("t1", {"lr": 0.01})
    host.group_failed("the worker group could not start (rank 0): the first all-reduce ...")
    assert not host.given_up()  # restarted once: the trial still waits for it
    assert host.poll(seq, 0, wait_s=0)["state"] == "pending"
    host.group_failed("the worker group could not start (rank 0): the first all-reduce ...")
    out = host.poll(seq, 0, wait_s=0)
    assert out["state"] == "failed" and out["error"].startswith(
        "the worker group could not start (rank 0): the first all-reduce")
    assert host.given_up() and not host.alive()  # its workers leave; the pool drops it
    assert host.next_job(-1, wait_s=0) == {"shutdown": True}


def test_a_trial_that_hangs_twice_is_not_retried_again_while_other_failures_are():
    import time

    host = group_host(collective_timeout="2s")
    seq = host.assign("t1", {"lr": 0.01})
    assert host.next_job(-1, wait_s=0)["job"]["attempt"] == 1
    assert host.next_job(-1, wait_s=0)["job"]["attempt"] == 2  # a quick failure: retried
    time.sleep(2.2)  # its workers silent for the collective timeout, then restarted
    assert host.next_job(-1, wait_s=0)["job"]["attempt"] == 3  # the first hang: retried
    time.sleep(2.2)
    assert "job" not in host.next_job(-1, wait_s=0)  # the second hang: failed
    out = host.poll(seq, 0, wait_s=0)
    assert out["state"] == "failed" and "hung 2 times" in out["error"]
    assert "resources.collective_timeout" in out["error"]


@pytest.mark.ray
@pytest.mark.slow
def test_a_peer_that_never_joins_fails_the_trial_within_the_guard_warm_and_cold(
        tmp_path, ray_instance):
    """Rank 1 stalls before the group's first collective. Cold (a Ray Train run per
    trial: the first all-reduce in the loop) and warm (the group's first collective as it
    starts, restarted once): the trial fails with the guard's line, long before rank 1
    would have joined (90 s) and the collective timeout (10 min)."""
    import hpsearch
    from hpsearch.driver.sweep.run import run_sweep

    assert ray_instance.is_initialized()
    for warm in (True, False):
        raw = warm_space(
            name=f"stall-{'warm' if warm else 'cold'}",
            trainable="tests.driver.trials.stalls_rank1:WORKLOAD",
            scheduler={"type": "asha", "time_attr": "epoch", "max_t": 1, "grace_period": 1},
            trials={"num": 1, "max_concurrent": 1, "max_failures": 0},
            resources={"workers": 2, "warm_workers": warm, "first_collective_timeout": "3s"})
        spec = parse_space(raw)
        result = run_sweep(spec, storage=str(tmp_path / "runs"))
        trials = hpsearch.read_trials(result.sweep_dir)
        assert list(trials.status) == ["failed"], (warm, trials.to_dict("records"))
        error = trials.error.iloc[0]
        assert "the first all-reduce between the 2 workers did not complete within 3 s" \
            in error, (warm, error)
