"""What a sweep may still start: its planned trials, its time budget and its deadline.

Tune is told to sample without end (``num_samples=-1``); the searcher asks
:func:`may_start_trial` before each new trial, and these limits end the search:

* **planned trials**: fewer than ``trials.num`` trials are known. Known are the trial
  table's rows and the trials Tune holds: after a killed driver, Tune's saved state can
  miss a trial that ended (its row is on disk), and without counting the rows Tune would
  start a replacement and run more trials than planned. A resume can raise the number.
* **deadline**: no trial starts that could not reach its first ASHA rung (the whole trial
  under FIFO) before the deadline, judged from this sweep's own measured times.

The time budget and the deadline also end running trials: Tune's ``time_budget_s`` is the
earlier of the two.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Iterable, Mapping

from hpsearch.driver import live
from hpsearch.space.spec import Spec

__all__ = ["StartLimits", "first_milestone_seconds", "may_start_trial"]


def first_milestone_seconds(history: Iterable[Mapping[str, Any]], spec: Spec) -> float | None:
    """The median seconds a trial of this sweep took to reach its first milestone (the
    first ASHA rung, or ``max_t`` without ASHA), from the history's ``time_total_s``;
    ``None`` until some trial has reached it."""
    sched = spec.scheduler
    milestone = sched.rungs()[0] if sched.rungs() else sched.max_t
    reached: dict[str, float] = {}
    for row in history:
        t, took = row.get(sched.time_attr), row.get("time_total_s")
        if t is None or took is None or row["trial_id"] in reached:
            continue
        try:
            if float(t) >= milestone:
                reached[row["trial_id"]] = float(took)
        except (TypeError, ValueError):
            continue
    return statistics.median(reached.values()) if reached else None


class StartLimits:
    """The limits on starting trials of one run of a sweep (see the module docstring).

    Attributes:
        num: Trials planned in all.
        deadline_at: Epoch seconds of the deadline, or ``None``.
        refused_for_deadline: A trial was not started because of the deadline.
    """

    def __init__(self, records: Any, spec: Spec, *, deadline_at: float | None = None):
        self.records = records
        self.spec = spec
        self.num = spec.trials.num
        self.deadline_at = deadline_at
        self.refused_for_deadline = False

    def may_start(self) -> bool:
        known = set(self.records.trials) | live.tune_trials()
        if len(known) >= self.num:
            return False
        if self.deadline_at is None:
            return True
        left = self.deadline_at - time.time()
        needed = first_milestone_seconds(self.records.history, self.spec)
        if left <= 0 or (needed is not None and needed > left):
            self.refused_for_deadline = True
            return False
        return True


def may_start_trial(sweep: str, num: int | None = None) -> bool:
    """Whether the sweep may start another trial: the searcher's ``may_start`` hook.

    ``num`` is used only outside a live driver's limits (kept for states pickled before
    the limits existed)."""
    limits = live.limits(sweep)
    if limits is not None:
        return limits.may_start()
    records = live.records(sweep)
    if records is None or num is None:
        return True
    return len(set(records.trials) | live.tune_trials(sweep)) < num
