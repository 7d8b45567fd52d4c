"""The sweep's side of the cluster ledger, against the real ledger actor."""

from __future__ import annotations

import time

import pytest

from hpsearch.driver.ledger import LedgerClient, SweepClaim

pytestmark = pytest.mark.ray


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
        # A new `want` waits for its answer.
        assert a.update(1, want=1) == 1 and a._pending is None
    finally:
        a.close()
        b.close()
