"""What ends a whole sweep before its plan is done: one Tune stopper, one reason.

:class:`SweepStopper` is the sweep's only ``Stopper``: Tune asks ``stop_all`` at every
step, and the first reason that holds ends the run and is kept as :attr:`reason`:

=================  =====================================================================
``interrupted``    Ctrl-C (:mod:`hpsearch.driver.sweep.interrupt`); running trials stay
                   unfinished in the record, and ``hpsearch resume`` continues them
``all_failed``     the first trials to end all failed: the same bug would fail the rest
``stalled``        nothing started, reported or ended for a long time while resource
                   requests were pending (:class:`~hpsearch.driver.monitor.stall.StallWatch`)
``deadline``       ``budget.deadline`` has come
``time_budget``    ``budget.time`` is spent (counted from this run's start)
``disk_full``      the sweep's disk is full (:class:`~hpsearch.driver.monitor.disk.DiskWatch`):
                   as for ``interrupted``, running trials stay unfinished to resume
``missing_metric`` a trial's first report lacks a metric the space's objectives or
                   constraints name (the record's ``problem``): every trial would
=================  =====================================================================
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import TYPE_CHECKING, Callable

from ray.tune.stopper import Stopper

from hpsearch.store import status as st
from hpsearch.store.records import TrialRecords

if TYPE_CHECKING:
    from hpsearch.driver.monitor.disk import DiskWatch
    from hpsearch.driver.monitor.stall import StallWatch

__all__ = ["TIME_BUDGET", "SweepStopper"]

#: The one reason that is no sweep status: the run ends ``finished`` or
#: ``no_trial_completed`` by what its trials found. The others are the sweep statuses
#: of :mod:`hpsearch.store.status` of the same names.
TIME_BUDGET = "time_budget"


@dataclass(eq=False, repr=False)
class SweepStopper(Stopper):
    """Ends the sweep for the first reason that holds (module docstring).

    Args:
        records: The sweep's records (for the all-failed rule).
        all_failed_after: How many first trials must all fail to stop.
        watch: The sweep's stall watch, or ``None``.
        time_budget_s: ``budget.time`` in seconds, or ``None``.
        deadline_at: The deadline in epoch seconds, or ``None``.
        clock: Epoch seconds now (tests pass their own).
        disk: The sweep's full-disk watch, or ``None``.
        problem: Returns why the sweep cannot go on (a metric the trials do not report),
            or ``None``.
    """

    records: TrialRecords
    _: KW_ONLY
    all_failed_after: int
    watch: StallWatch | None = None
    time_budget_s: InitVar[float | None] = None
    deadline_at: float | None = None
    clock: Callable[[], float] = time.time
    disk: DiskWatch | None = None
    problem: Callable[[], str | None] = lambda: None
    #: Why the sweep ended, once a reason held (module docstring), else ``None``.
    reason: str | None = field(default=None, init=False)

    def __post_init__(self, time_budget_s: float | None) -> None:
        self.started = self.clock()
        self.budget_ends = self.started + time_budget_s if time_budget_s else None

    def interrupt(self) -> None:
        """Ctrl-C: end the run at Tune's next step, leaving running trials to resume."""
        self.reason = self.reason or st.SWEEP_INTERRUPTED

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        if self.reason is None:
            self.reason = self._why()
        return self.reason is not None

    def _why(self) -> str | None:
        if self.disk is not None and self.disk.full:
            return st.SWEEP_DISK_FULL
        if self.problem() is not None:
            return st.SWEEP_MISSING_METRIC
        if self.all_failed():
            return st.SWEEP_ALL_FAILED
        if self.watch is not None and self.watch.should_stop():
            return st.SWEEP_STALLED
        now = self.clock()
        if self.deadline_at is not None and now >= self.deadline_at:
            return st.SWEEP_DEADLINE
        if self.budget_ends is not None and now >= self.budget_ends:
            return TIME_BUDGET
        return None

    def all_failed(self) -> bool:
        """Whether the first ``all_failed_after`` trials to end all failed."""
        counts = self.records.counts()  # costs what changed since the last call
        ended = sum(n for status, n in counts.items() if status in st.ENDED)
        return ended >= self.all_failed_after and counts.get(st.FAILED, 0) == ended

    def __getstate__(self):
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {}
