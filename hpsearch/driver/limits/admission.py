"""The one rule for starting trials: how many may run now, and whether any may start.

A sweep's searcher asks :meth:`Admission.decide` before each trial, with what it knows:
how many of its trials run and how many it may still start (unfinished trials of the
record to continue, and the new trials the plan has left). The answer is one of

* ``start``: below the cap, with trials to start and time to run them;
* ``wait``: at the cap (the planned slots, or the sweep's share of a shared cluster,
  :mod:`hpsearch.driver.limits.ledger`): Tune asks again at a later step;
* ``done``: nothing left to start, or the deadline is too close for a trial to reach its
  first rung (judged from this sweep's own trials' times): the search ends.

The time budget and the deadline also end running trials; that is the sweep's stopper's
job (:mod:`hpsearch.driver.monitor.stops`). Each decision costs the same however long the
sweep has run (:class:`MilestoneTimes` reads only the reports that arrived since).
"""

from __future__ import annotations

import bisect
import functools
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from hpsearch.space.spec import Spec

if TYPE_CHECKING:
    from hpsearch.driver.limits.ledger import LedgerClient


class Reports(Protocol):
    """The sweep's reports, as the record's rows hold them
    (:class:`~hpsearch.store.records.TrialRecords`: ``history``, and ``rewrites``, which
    changes when the history is rebuilt rather than appended to)."""

    history: Sequence[Mapping[str, Any]]

__all__ = ["DONE", "START", "WAIT", "Admission", "MilestoneTimes", "admission_for"]

START, WAIT, DONE = "start", "wait", "done"


class MilestoneTimes:
    """The median seconds this sweep's trials took to reach their first milestone (the
    first ASHA rung, or ``max_t`` without ASHA), from the records' history, kept up to
    date: each call reads only the reports that arrived since the previous one.

    Attributes:
        rows_read: History rows read so far (tests count work with it).
    """

    def __init__(self, spec: Spec):
        sched = spec.scheduler
        self.time_attr = sched.result_key  # the history column: time_total_s for "time"
        self.milestone = sched.rungs()[0] if sched.rungs() else sched.max_t
        self.rows_read = 0
        self._reset(None)

    def _reset(self, rewrites: int | None) -> None:
        self.rewrites = rewrites
        self.seen = 0
        self.reached: set[str] = set()
        self.times: list[float] = []  # sorted

    def median(self, records: Reports) -> float | None:
        history = records.history
        rewrites = getattr(records, "rewrites", None)
        if rewrites != self.rewrites or len(history) < self.seen:
            self._reset(rewrites)
        for row in history[self.seen:]:
            self._read(row)
        self.rows_read += len(history) - self.seen
        self.seen = len(history)
        n = len(self.times)
        if not n:
            return None
        mid = n // 2
        return self.times[mid] if n % 2 else (self.times[mid - 1] + self.times[mid]) / 2

    def _read(self, row: dict[str, Any]) -> None:
        if row.get("evaluated") is False:  # a log_every row: no rung is judged there
            return
        t, took = row.get(self.time_attr), row.get("time_total_s")
        if t is None or took is None or row["trial_id"] in self.reached:
            return
        try:
            if float(t) >= self.milestone:
                self.reached.add(row["trial_id"])
                bisect.insort(self.times, float(took))
        except (TypeError, ValueError):
            return


@dataclass(kw_only=True, eq=False)
class Admission:
    """The start rule of one run of a sweep (see the module docstring).

    Args:
        planned: Trials the sweep plans in all (``trials.num``).
        slots: Trials at once when the sweep has the cluster to itself.
        deadline_at: Epoch seconds of the deadline, or ``None``.
        first_milestone_s: The seconds a trial takes to its first rung, or ``None`` while
            unknown (:meth:`MilestoneTimes.median` of the records).
        ledger: The sweep's claim on a shared cluster (``update(running, want=...)``
            returns its share), or ``None`` on a cluster of its own.
        clock: Epoch seconds now (tests pass their own).

    Attributes:
        refused_for_deadline: A trial was not started because of the deadline.
    """

    planned: int
    slots: int
    deadline_at: float | None = None
    first_milestone_s: Callable[[], float | None] = lambda: None
    ledger: LedgerClient | None = None
    clock: Callable[[], float] = time.time
    refused_for_deadline: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.ledger is not None:  # registered at once
            self.ledger.update(0, want=min(self.slots, self.planned), force=True)

    def want(self, *, active: int, to_start: int) -> int:
        """The most trials the sweep could run at once now: those running and those it may
        still start, within its slots. Never fewer than those running: a running trial
        may be waiting for a slot of its share (a warm worker group)."""
        return min(self.slots, active + max(0, to_start)) if to_start > 0 else active

    def cap(self, *, active: int, to_start: int, starting: bool = False) -> int:
        """Trials the sweep may run at once now: its slots, or its share when shared.

        ``starting``: the answer decides whether a trial starts. A share the sweep knew
        is enough to say wait; a start takes a share the ledger answered within the last
        0.25 s, since an older answer may predate a sweep that registered since (with
        it, a sweep started three trials at once on a share of two)."""
        if self.ledger is None:
            return self.slots
        want = self.want(active=active, to_start=to_start)
        share = self.ledger.update(active, want=want, fresh=starting)
        if starting and active < min(self.slots, share):
            share = self.ledger.confirmed(active)
        return min(self.slots, share)

    def decide(self, *, active: int, to_start: int) -> str:
        """``start``, ``wait`` or ``done`` for one more trial (module docstring)."""
        if to_start <= 0:
            return DONE
        if self._too_late():
            self.refused_for_deadline = True
            return DONE
        if active >= self.cap(active=active, to_start=to_start, starting=True):
            return WAIT
        return START

    def held_back(self, *, active: int, to_start: int) -> bool:
        """Whether the share keeps the sweep below what it would run alone: it runs its
        share and has trials to start (then no idle trial process should hold a slot)."""
        if self.ledger is None or to_start <= 0:
            return False
        cap = self.cap(active=active, to_start=to_start)
        return active >= cap and cap < self.want(active=active, to_start=to_start)

    def share(self) -> int:
        """The sweep's slots now: its share of a shared cluster, else its planned slots."""
        return self.slots if self.ledger is None else min(self.slots, max(0, self.ledger.share))

    def _too_late(self) -> bool:
        if self.deadline_at is None:
            return False
        left = self.deadline_at - self.clock()
        needed = self.first_milestone_s()
        return left <= 0 or (needed is not None and needed > left)

    def close(self) -> None:
        """Give the share back to the other sweeps at once."""
        if self.ledger is not None:
            self.ledger.close()


def admission_for(spec: Spec, *, slots: int, records: Reports, deadline_at: float | None,
                  sweep_key: str, sweep_name: str) -> Admission:
    """One run's admission, in one operation: the plan's ``slots``, the deadline judged by
    the first milestone's median time in ``records``, and the run registered in the
    cluster's ledger (:mod:`hpsearch.driver.limits.ledger`) under ``sweep_key`` (the
    sweep's directory; a random part is added per run) and ``sweep_name``."""
    from hpsearch.driver.limits.ledger import EXPIRE_S, LedgerClient, SweepClaim

    ledger = LedgerClient(SweepClaim(
        sweep_id=f"{sweep_key}#{uuid.uuid4().hex[:8]}", name=sweep_name,
        demand=spec.resources.per_trial(), want=slots, weight=spec.resources.share,
        registered=time.time(),
        expire_s=float(os.environ.get("HPSEARCH_LEDGER_EXPIRE_S", EXPIRE_S))))
    return Admission(planned=spec.trials.num, slots=slots, deadline_at=deadline_at,
                     first_milestone_s=functools.partial(MilestoneTimes(spec).median, records),
                     ledger=ledger)
