"""The sweep's side of the cluster ledger, against the real ledger actor."""

from __future__ import annotations

import time

import pytest

from hpsearch.driver.limits.ledger import LedgerClient, SweepClaim

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def eventually(client: LedgerClient, running: int, share: int, timeout: float = 15.0) -> float:
    """Seconds until ``client`` reports ``share``; fails after ``timeout``."""
    start = time.monotonic()
    while client.update(running) != share:
        assert time.monotonic() - start < timeout, f"share {client.share}, expected {share}"
        time.sleep(0.02)
    return time.monotonic() - start


def test_shares_follow_the_ledger_without_the_driver_waiting_for_each_answer(ray_instance):
    cpus = int(ray_instance.cluster_resources()["CPU"])
    assert cpus >= 2
    a = LedgerClient(SweepClaim("test-a", "a", {"CPU": 1}, want=cpus, registered=1.0),
                     every_s=0.0)
    b = LedgerClient(SweepClaim("test-b", "b", {"CPU": 1}, want=cpus, registered=2.0),
                     every_s=0.0)
    try:
        assert a.update(0, force=True) == cpus  # registering waits: alone, the cluster
        assert b.update(0, force=True) == cpus // 2  # the second sweep: half of it
        # `a` hears of `b` on a later report. The call that sends it returns at once with
        # the share `a` knew; the answer is taken by a following call.
        assert a.update(1) == cpus and a._pending is not None
        eventually(a, 1, cpus - cpus // 2)
        b.close()
        eventually(a, 1, cpus)  # `b` gone: all of it again
        # A start's check hears of a sweep that registered since at once: it waits for a
        # new answer when the one it has is over 0.25 s old.
        c = LedgerClient(SweepClaim("test-c", "c", {"CPU": 1}, want=cpus, registered=3.0))
        try:
            assert c.update(0, force=True) == cpus // 2
            time.sleep(0.3)
            assert a.confirmed(1) == cpus - cpus // 2 and a._pending is None
        finally:
            c.close()
        eventually(a, 1, cpus)
        # A new `want` waits for its answer.
        assert a.update(1, want=1) == 1 and a._pending is None
    finally:
        a.close()
        b.close()


def test_a_warm_sweeps_pool_follows_its_share_of_the_ledger(ray_instance, tmp_path):
    """The wiring from ledger to warm worker groups, with the real ledger and pool actors
    (no trial runs): a second sweep on the cluster shrinks the first one's pool to its
    share at the driver's next step, and the pool grows back when that sweep leaves."""
    import io

    from hpsearch.driver.limits.plan import make_plan
    from hpsearch.driver.sweep.fit import SweepRun
    from hpsearch.driver.trials.resolve import resolve_runner
    from hpsearch.driver.trials.warm import WarmRunner
    from hpsearch.space import parse_space
    from hpsearch.store.layout import SweepDir
    from hpsearch.driver.record.sweep_record import SweepRecord

    cpus = int(ray_instance.cluster_resources()["CPU"])
    spec = parse_space({
        "name": "warm-share", "trainable": "digits",
        "objective": {"metric": "val_loss", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
        "trials": {"num": 8},
        # two workers of half a CPU: a trial needs 1 CPU, so the cluster has `cpus` slots
        "resources": {"workers": 2, "cpus_per_worker": 0.5},
    })
    runner = resolve_runner(spec)
    assert isinstance(runner, WarmRunner)
    sweep = SweepDir.at(tmp_path, "warm-share")
    sweep.path.mkdir(parents=True)
    plan = make_plan(spec, ray_instance.cluster_resources())
    assert plan.slots == cpus
    run = SweepRun(SweepRecord(spec, sweep), runner, plan, stream=io.StringIO())
    run.admission.ledger.every_s = 0.0
    run.monitor.housekeeping.every_s = 0.0
    other = LedgerClient(SweepClaim("test-other", "other", {"CPU": 1}, want=cpus,
                                    registered=time.time()), every_s=0.0)

    def pool_limit_becomes(limit: int, timeout: float = 15.0) -> None:
        start = time.monotonic()
        while True:
            run.search.searcher.heartbeat()  # as Tune's loop does at each step
            run.monitor.housekeeping.on_step_end(0, [])
            got = ray_instance.get(runner._pool().size.remote())["limit"]
            if got == limit:
                return
            assert time.monotonic() - start < timeout, f"pool limit {got}, expected {limit}"
            time.sleep(0.05)

    runner.open(sweep, slots=cpus)
    try:
        pool_limit_becomes(cpus)  # alone: every slot
        assert other.update(0, force=True) == cpus // 2
        pool_limit_becomes(cpus - cpus // 2)
        other.close()
        pool_limit_becomes(cpus)
    finally:
        other.close()
        runner.close()
        run.admission.close()
    deadline = time.monotonic() + 30  # the pool the runner held goes with its close
    while runner._pool() is not None:
        assert time.monotonic() < deadline, "the warm pool outlived runner.close()"
        time.sleep(0.1)
