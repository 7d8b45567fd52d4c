"""Running trials that have gone quiet: named on the console, never waited on in silence.

A trial that is running but reports nothing is either slow or hung (a collective waiting
for a dead peer, a script waiting on a child, a data loader deadlocked). :class:`Silences`
tells the two apart by the trial's own pace: a trial is *overdue* when it has been silent
for ``factor`` times the longest wait its reports so far took (from its start to its first
report, and between reports), and at least ``floor_s``. A trial with no report yet is
measured against the slowest first report of the sweep's other trials, or, before any,
against ``first_report_s``. Each silence is named once; a report ends it.

:class:`QuietTrials` is the Tune callback that feeds it and prints what it finds.
Stopping a hung command trial is the trial's own job (``trials.hung_after``, read by the
command runner), so this needs no access to Tune's controller.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ray.tune import Callback

__all__ = ["Overdue", "QuietTrials", "Silences"]


@dataclass(frozen=True)
class Overdue:
    """A running trial silent for ``silent_s``; ``usual_s``: the wait it was measured
    against (``None``: no trial has reported yet)."""

    trial_id: str
    silent_s: float
    usual_s: float | None


@dataclass
class _Pace:
    last: float
    longest: float | None = None  # the longest wait for a report so far
    named: bool = False


@dataclass
class Silences:
    """The pace of each running trial's reports (see the module docstring).

    Example:
        >>> s = Silences(factor=5, floor_s=60, first_report_s=600)
        >>> s.started("a", 0); s.reported("a", 20); s.reported("a", 50)
        >>> s.overdue(150)   # silent 100 s; its longest wait was 30 s: 5 x 30 = 150 s
        []
        >>> s.overdue(201)
        [Overdue(trial_id='a', silent_s=151, usual_s=30)]
        >>> s.overdue(400)   # named once per silence
        []
    """

    factor: float = 5.0
    floor_s: float = 120.0
    first_report_s: float = 600.0
    _trials: dict[str, _Pace] = field(default_factory=dict)
    _first_reports: list[float] = field(default_factory=list)

    def started(self, trial_id: str, now: float) -> None:
        self._trials[trial_id] = _Pace(last=now)

    def reported(self, trial_id: str, now: float) -> None:
        pace = self._trials.setdefault(trial_id, _Pace(last=now))
        wait = now - pace.last
        if pace.longest is None:
            self._first_reports.append(wait)
        pace.longest = wait if pace.longest is None else max(pace.longest, wait)
        pace.last, pace.named = now, False

    def ended(self, trial_id: str) -> None:
        self._trials.pop(trial_id, None)

    def overdue(self, now: float) -> list[Overdue]:
        """The trials whose silence has just become overdue (each silence once)."""
        found = []
        for trial_id, pace in self._trials.items():
            usual = pace.longest if pace.longest is not None else (
                max(self._first_reports) if self._first_reports else None)
            limit = self.first_report_s if usual is None else max(self.floor_s,
                                                                  self.factor * usual)
            silent = now - pace.last
            if not pace.named and silent > limit:
                pace.named = True
                found.append(Overdue(trial_id, silent, usual))
        return found


def describe(item: Overdue, *, hung_after_s: float | None) -> str:
    """One console line for an overdue trial."""
    since = (f"its reports so far came at most {item.usual_s:.0f} s apart"
             if item.usual_s is not None else "no trial has reported yet")
    then = (f"it is stopped as hung after {hung_after_s:.0f} s of silence (trials.hung_after)"
            if hung_after_s else "set trials.hung_after to stop such a trial")
    return (f"trial {item.trial_id} has reported nothing for {item.silent_s:.0f} s "
            f"({since}); its output: trials/{item.trial_id}/output.log; {then}")


class QuietTrials(Callback):
    """Names running trials that have gone quiet (:class:`Silences`) with ``log``."""

    def __init__(self, log: Callable[[str], None], *, trial_id: Callable[[Any], str],
                 hung_after_s: float | None = None, silences: Silences | None = None,
                 check_every_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.log = log
        self.trial_id = trial_id
        self.hung_after_s = hung_after_s
        self.silences = silences or Silences()
        self.check_every_s = check_every_s
        self.clock = clock
        self.last_check = 0.0

    def __getstate__(self):
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {}

    def on_trial_start(self, iteration, trials, trial, **info):
        self.silences.started(self.trial_id(trial), self.clock())

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.silences.reported(self.trial_id(trial), self.clock())

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.silences.ended(self.trial_id(trial))

    on_trial_error = on_trial_complete

    def on_step_end(self, iteration, trials, **info):
        now = self.clock()
        if now - self.last_check < self.check_every_s:
            return
        self.last_check = now
        for item in self.silences.overdue(now):
            self.log(describe(item, hung_after_s=self.hung_after_s))
