"""Sharing one cluster between sweeps: a ledger every sweep registers with.

Ray has no notion of fairness between jobs (ray-project/ray#21329): each sweep would plan
for the whole cluster, the first to start would hold every slot for its whole length,
and 2-worker trials of two sweeps could each start a trainer and wait for workers the
other holds. So every sweep on a cluster registers with one ledger, a detached named Ray
actor (:data:`LEDGER_NAME` in namespace :data:`NAMESPACE`), and starts a trial only while
it runs fewer than its share.

Shares are weighted max-min fair in whole trial slots (:func:`fair_shares`): slots go one
at a time to the sweep with the fewest slots per unit of weight (``resources.share``) that
still wants one and whose trial still fits in what is left; ties go to the sweep that
registered first. A sweep alone gets the whole cluster; one whose demand is met gives the
rest to the others; when not every sweep can run a trial, the earlier ones run and the
later ones wait (a slot that never fits would otherwise deadlock 2-worker trials).

A sweep reports every few seconds; one whose driver died stops reporting and loses its
share after :data:`EXPIRE_S` seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

from hpsearch.driver.cluster.connect import NAMESPACE

__all__ = ["EXPIRE_S", "LEDGER_NAME", "NAMESPACE", "LedgerClient", "SweepClaim", "fair_shares",
           "ledger_table"]

LEDGER_NAME = "hpsearch-ledger"
#: Seconds without a report after which a sweep's share goes back to the others
#: (``HPSEARCH_LEDGER_EXPIRE_S`` overrides it for a sweep).
EXPIRE_S = 30.0


@dataclass(frozen=True)
class SweepClaim:
    """What a sweep asks of the cluster.

    Attributes:
        sweep_id: Unique per run of a sweep (its directory and a random part).
        name: For people: the sweep's name.
        demand: Resources one trial holds (``{"CPU": 2, "GPU": 2}``).
        want: The most slots it can use now (its cap, or the trials it has left).
        weight: ``resources.share``: twice the weight, twice the slots.
        registered: When it registered (ties go to the earlier).
        expire_s: Seconds without a report before its share goes back.
    """

    sweep_id: str
    name: str
    demand: Mapping[str, float]
    want: int
    weight: float = 1.0
    registered: float = 0.0
    expire_s: float = EXPIRE_S


def fair_shares(capacity: Mapping[str, float], claims: list[SweepClaim]) -> dict[str, int]:
    """Trial slots per sweep: weighted max-min fair, whole slots, never over capacity.

    Pure; see the module docstring for the rule.

    Example:
        >>> a = SweepClaim("a", "a", {"CPU": 1}, want=4, registered=1)
        >>> b = SweepClaim("b", "b", {"CPU": 1}, want=4, registered=2)
        >>> fair_shares({"CPU": 4}, [a, b])
        {'a': 2, 'b': 2}
    """
    left = {k: float(v) for k, v in capacity.items()}
    shares = {c.sweep_id: 0 for c in claims}
    order = sorted(claims, key=lambda c: c.registered)
    while True:
        candidates = [c for c in order if shares[c.sweep_id] < c.want and _fits(c.demand, left)]
        if not candidates:
            return shares
        pick = min(candidates, key=lambda c: (shares[c.sweep_id] / max(c.weight, 1e-9),
                                              c.registered))
        shares[pick.sweep_id] += 1
        for key, need in pick.demand.items():
            if need:
                left[key] = left.get(key, 0.0) - float(need)


def _fits(demand: Mapping[str, float], left: Mapping[str, float]) -> bool:
    return all(left.get(k, 0.0) + 1e-9 >= float(v) for k, v in demand.items() if v)


class Ledger:
    """The ledger actor's state: claims and their last report (see the module doc)."""

    def __init__(self) -> None:
        self.claims: dict[str, SweepClaim] = {}
        self.seen: dict[str, float] = {}
        self.running: dict[str, int] = {}

    def _expire(self) -> None:
        now = time.time()
        for sweep_id in [s for s, t in self.seen.items()
                         if now - t > self.claims[s].expire_s]:
            self.unregister(sweep_id)

    def _capacity(self) -> dict[str, float]:
        import ray

        return dict(ray.cluster_resources())

    def report(self, claim: SweepClaim, running: int) -> int:
        """Register or update ``claim``; returns its share now."""
        self._expire()
        known = self.claims.get(claim.sweep_id)
        if known is not None:
            claim = SweepClaim(claim.sweep_id, claim.name, claim.demand, claim.want,
                               claim.weight, known.registered, claim.expire_s)
        self.claims[claim.sweep_id] = claim
        self.seen[claim.sweep_id] = time.time()
        self.running[claim.sweep_id] = running
        return fair_shares(self._capacity(), list(self.claims.values()))[claim.sweep_id]

    def unregister(self, sweep_id: str) -> None:
        for table in (self.claims, self.seen, self.running):
            table.pop(sweep_id, None)

    def table(self) -> list[dict[str, Any]]:
        """Every registered sweep with its share and running trials."""
        self._expire()
        shares = fair_shares(self._capacity(), list(self.claims.values()))
        now = time.time()
        return [{"sweep_id": c.sweep_id, "name": c.name, "share": shares[c.sweep_id],
                 "running": self.running.get(c.sweep_id, 0), "want": c.want,
                 "weight": c.weight, "demand": dict(c.demand),
                 "seen_s_ago": round(now - self.seen.get(c.sweep_id, now), 1)}
                for c in sorted(self.claims.values(), key=lambda c: c.registered)]


class LedgerClient:
    """A sweep's side of the ledger: reports at most every ``every_s`` seconds and keeps the
    last share it was given. Every call is best effort: if the ledger cannot be reached,
    the sweep keeps the whole of its planned slots (as it would alone).

    Only registering, a new ``want`` and :meth:`confirmed` (the admission's check before a
    trial starts, when the last answer is over 0.25 s old) wait for the ledger's answer.
    Other reports are
    sent without waiting, and their answer is taken at a later call: the sweep's driver
    asks several times a second, and a round trip to the ledger actor costs 2-20 ms on a
    busy machine (3.7 s of a 600-trial sweep of trivial trials, 5% of its wall clock,
    when every report waited)."""

    #: Seconds to wait for an answer before behaving as a sweep alone.
    TIMEOUT_S = 10.0

    def __init__(self, claim: SweepClaim, *, every_s: float = 2.0):
        self.claim = claim
        self.every_s = every_s
        self.share: int = claim.want
        self.last = 0.0  # when the last report went out
        self.answered = 0.0  # when the report behind the share known went out
        self._actor = None
        self._pending: Any = None  # the report sent and not answered yet

    def _ledger(self) -> Any:
        if self._actor is None:
            import ray

            self._actor = ray.remote(num_cpus=0)(Ledger).options(
                name=LEDGER_NAME, namespace=NAMESPACE, lifetime="detached",
                get_if_exists=True, max_concurrency=1).remote()
        return self._actor

    def update(self, running: int, *, want: int | None = None, force: bool = False,
               fresh: bool = False) -> int:
        """Report ``running`` trials (and a new ``want``); return the share. Reports at
        most every ``every_s`` seconds (``fresh``: every 0.25 s, for a decision to start a
        trial) and one at a time; ``force`` (and a new ``want``) reports now and waits for
        the answer."""
        if want is not None and want != self.claim.want:
            self.claim = SweepClaim(self.claim.sweep_id, self.claim.name, self.claim.demand,
                                    want, self.claim.weight, self.claim.registered,
                                    self.claim.expire_s)
            force = True
        self._take_answer()
        every = 0.25 if fresh else self.every_s
        if not force and (self._pending is not None or time.monotonic() - self.last < every):
            return self.share
        self.last = time.monotonic()
        try:
            import ray

            self._pending = self._ledger().report.remote(self.claim, running)
            if force:
                self.share, self._pending = ray.get(self._pending, timeout=self.TIMEOUT_S), None
                self.answered = self.last
        except Exception:  # noqa: BLE001 - no ledger: behave as a sweep alone
            self.share, self._pending = self.claim.want, None
            self.answered = time.monotonic()
        return self.share

    def confirmed(self, running: int, *, want: int | None = None,
                  within_s: float = 0.25) -> int:
        """The share as the ledger answered at most ``within_s`` seconds ago: waits for a
        new answer when the last is older. A decision to start a trial asks this, since
        the answer in flight may predate a sweep that registered since; a burst of starts
        shares one answer, so a sweep waits for at most a few answers a second."""
        self._take_answer()
        if want is None and time.monotonic() - self.answered < within_s:
            return self.share
        return self.update(running, want=want, force=True)

    def _take_answer(self) -> None:
        """The answer to the report in flight, if it has come."""
        if self._pending is None:
            return
        try:
            import ray

            ready, _ = ray.wait([self._pending], timeout=0)
            if ready:
                # as fresh as the report it answers: an answer that was in flight while
                # another sweep registered does not know of it
                self.share, self._pending = ray.get(ready[0]), None
                self.answered = self.last
            elif time.monotonic() - self.last > self.TIMEOUT_S:
                raise TimeoutError
        except Exception:  # noqa: BLE001 - no ledger: behave as a sweep alone
            self.share, self._pending = self.claim.want, None

    def close(self) -> None:
        try:
            import ray

            ray.get(self._ledger().unregister.remote(self.claim.sweep_id), timeout=10)
        except Exception:  # noqa: BLE001 - it expires by itself
            pass


def ledger_table(timeout_s: float = 10.0) -> list[dict[str, Any]] | None:
    """The sweeps registered on the connected cluster, or ``None`` without a ledger."""
    import ray

    try:
        actor = ray.get_actor(LEDGER_NAME, namespace=NAMESPACE)
    except ValueError:
        return None
    return ray.get(actor.table.remote(), timeout=timeout_s)
