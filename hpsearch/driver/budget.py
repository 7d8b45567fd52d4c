"""What a sweep may still start: its planned trials, its time budget and its deadline.

Tune is told to sample without end (``num_samples=-1``); the searcher asks
:func:`may_start_trial` before each new trial, and these limits end the search:

* **planned trials**: fewer than ``trials.num`` trials are known. Known are the trial
  table's rows and the trials Tune holds: after a killed driver, Tune's saved state can
  miss a trial that ended (its row is on disk), and without counting the rows Tune would
  start a replacement and run more trials than planned. A resume can raise the number.
* **deadline**: no trial starts that could not reach its first ASHA rung (the whole trial
  under FIFO) before the deadline, judged from this sweep's own measured times.
* **share**: on a cluster other sweeps use too, no more trials at once than this sweep's
  share (:mod:`hpsearch.driver.ledger`). This one only delays a trial; the others end
  the search.

The time budget and the deadline also end running trials: Tune's ``time_budget_s`` is the
earlier of the two.

Each check costs the same however long the sweep has run: the trials known are counted,
not collected (:meth:`StartLimits.known`), and the deadline's median is kept up to date
from the reports that arrived since the last check (:class:`MilestoneTimes`).
"""

from __future__ import annotations

import bisect
import statistics
import time
from typing import Any, Iterable, Mapping

from hpsearch.driver import live
from hpsearch.space.spec import Spec

__all__ = ["MilestoneTimes", "StartLimits", "first_milestone_seconds", "may_start_trial"]


def first_milestone_seconds(history: Iterable[Mapping[str, Any]], spec: Spec) -> float | None:
    """The median seconds a trial of this sweep took to reach its first milestone (the
    first ASHA rung, or ``max_t`` without ASHA), from the history's ``time_total_s``;
    ``None`` until some trial has reached it."""
    sched = spec.scheduler
    milestone = sched.rungs()[0] if sched.rungs() else sched.max_t
    reached: dict[str, float] = {}
    for row in history:
        if row.get("evaluated") is False:  # a log_every row: no rung is judged there
            continue
        t, took = row.get(sched.result_key), row.get("time_total_s")
        if t is None or took is None or row["trial_id"] in reached:
            continue
        try:
            if float(t) >= milestone:
                reached[row["trial_id"]] = float(took)
        except (TypeError, ValueError):
            continue
    return statistics.median(reached.values()) if reached else None


class MilestoneTimes:
    """:func:`first_milestone_seconds` of a records' history, kept up to date: each call
    reads only the reports that arrived since the previous one.

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

    def median(self, records: Any) -> float | None:
        history = records.history
        rewrites = getattr(records, "rewrites", None)
        if rewrites != self.rewrites or len(history) < self.seen:
            self._reset(rewrites)
        for i in range(self.seen, len(history)):
            row = history[i]
            if row.get("evaluated") is False:  # a log_every row: no rung is judged there
                continue
            t, took = row.get(self.time_attr), row.get("time_total_s")
            if t is None or took is None or row["trial_id"] in self.reached:
                continue
            try:
                if float(t) >= self.milestone:
                    self.reached.add(row["trial_id"])
                    bisect.insort(self.times, float(took))
            except (TypeError, ValueError):
                continue
        self.rows_read += len(history) - self.seen
        self.seen = len(history)
        n = len(self.times)
        if not n:
            return None
        mid = n // 2
        return self.times[mid] if n % 2 else (self.times[mid - 1] + self.times[mid]) / 2


class StartLimits:
    """The limits on starting trials of one run of a sweep (see the module docstring).

    Attributes:
        num: Trials planned in all.
        deadline_at: Epoch seconds of the deadline, or ``None``.
        refused_for_deadline: A trial was not started because of the deadline.
    """

    def __init__(self, records: Any, spec: Spec, *, deadline_at: float | None = None,
                 slots: int | None = None, ledger: Any = None):
        self.records = records
        self.spec = spec
        self.num = spec.trials.num
        self.deadline_at = deadline_at
        self.slots = slots or spec.trials.num
        self.ledger = ledger
        self.refused_for_deadline = False
        self.waiting_for_share = False
        self.admitted = 0  # trials allowed since Tune last told us what it holds
        self.admitted_ids: set[Any] = set()  # their ids: known before Tune lists them
        self.outside: set[str] | None = None  # Tune's trials without a row, if told
        self.milestones = MilestoneTimes(spec)
        if ledger is not None:
            ledger.update(0, want=self.want(), force=True)  # registered before any trial

    def note_tune(self, outside: set[str] | None = None) -> None:
        """Tune has just told :mod:`live` what it holds: the admitted trials are in it.

        Args:
            outside: Tune's trials that have no row in the records (not started yet), so
                :meth:`known` need not compare every trial id.
        """
        self.admitted = 0
        self.admitted_ids = set()
        self.outside = outside

    def known(self) -> int:
        """Trials known: the table's rows, Tune's trials without one, and the trials
        admitted since Tune last told us its trials. Counted from the few trials without a
        row when Tune's were told (:meth:`note_tune`).

        Tune asks for up to ``max_concurrent_trials`` trials within one step (more than
        one when several slots are free at once, as when a shared cluster's share grows):
        without the admitted ones, the last planned trial counted as not yet known and
        the sweep started more trials than planned."""
        trials = self.records.trials
        if self.outside is None:
            return len(set(trials) | live.tune_trials() | self.admitted_ids)
        outside = self.outside
        return (len(trials) + sum(1 for tid in outside if tid not in trials)
                + sum(1 for tid in self.admitted_ids if tid not in trials and tid not in outside))

    def active(self) -> int:
        """This sweep's trials Tune holds and has not ended, and those admitted since (Tune
        may ask for several trials within one step)."""
        return live.active_trials() + self.admitted

    def want(self) -> int:
        """The most trials this sweep could run at once now: those Tune holds unended, and
        those it may still start. Never fewer than the first: a trial Tune holds waits
        for a slot of the share (a warm worker group), so a share below it would hold
        that trial, and the sweep, for good."""
        return min(self.slots, max(0, self.num - self.known()) + self.active())

    def share(self, *, fresh: bool = False) -> int:
        """Trials this sweep may run at once now (its planned slots when alone)."""
        if self.ledger is None:
            return self.slots
        return self.ledger.update(self.active(), want=self.want(), fresh=fresh)

    def may_start(self, trial_id: str | None = None) -> bool | None:
        """``True``: start a trial. ``False``: start no more (the search ends). ``None``:
        not now, the sweep is at its share of a shared cluster.

        Args:
            trial_id: The Tune trial that would start (counted as known once admitted).
        """
        if self.known() >= self.num:
            return False
        if self.deadline_at is not None:
            left = self.deadline_at - time.time()
            needed = self.milestones.median(self.records)
            if left <= 0 or (needed is not None and needed > left):
                self.refused_for_deadline = True
                return False
        share = self.share(fresh=True)
        if self.active() >= share:
            self.waiting_for_share = self._idle_actors_unneeded(share)
            return None
        self.waiting_for_share = False
        self.admitted += 1
        self.admitted_ids.add(trial_id if trial_id is not None else object())
        return True

    def _idle_actors_unneeded(self, share: int) -> bool:
        """Whether Tune's idle cached actors hold resources this sweep will not use soon:
        the ledger holds it below what it would run alone, or it has no trial left to
        start. A sweep whose slots are all busy, alone, reuses them for its next trials."""
        return (self.active() >= share and share < self.want()) or self.known() >= self.num

    def heartbeat(self) -> None:
        """Keep the sweep's claim alive and its share current (called every step)."""
        if self.ledger is not None:
            self.waiting_for_share = self._idle_actors_unneeded(self.share())

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()


def may_start_trial(sweep: str, num: int | None = None, *,
                    trial_id: str | None = None) -> bool | None:
    """Whether the sweep may start trial ``trial_id``: the searcher's ``may_start`` hook
    (``None``: not now; see :meth:`StartLimits.may_start`).

    ``num`` is used only outside a live driver's limits (kept for states pickled before
    the limits existed)."""
    limits = live.limits(sweep)
    if limits is not None:
        return limits.may_start(trial_id)
    records = live.records(sweep)
    if records is None or num is None:
        return True
    return len(set(records.trials) | live.tune_trials(sweep)) < num
