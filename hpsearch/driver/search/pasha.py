"""PASHA's rule as plain data: ASHA whose end grows while its top rungs disagree.

Progressive ASHA (Bohdal et al., ICLR 2023) runs ASHA with a small maximum first: trials
end at the second rung, as if it were ``max_t``. Each time a trial reaches that end, the
ranking of the trials at the two highest open levels is compared; when they disagree, the
next rung opens and trials train further, up to the space's ``max_t``. When the ranking
is settled early, the sweep spends its time on more configurations instead of longer runs.

Two rankings disagree when two trials change places between the levels by more than the
noise ``epsilon`` at both: ``a`` is ahead of ``b`` by more than ``epsilon`` at the lower
level and behind it by more than ``epsilon`` at the higher one. ``epsilon`` is measured
from the trials' own curves, as the paper's automatic estimate does: over every pair of
trials at the higher level, each time their curves cross between two reports they both
made before it, the gap between them just after the crossing; ``epsilon`` is the 90th
percentile of those gaps (0 while no curves cross below the end). Trials that trade places by no more than their
curves' usual wobble do not open a rung.

This module is hpsearch's own statement of that rule (``scheduler.progressive: true``):
:class:`ProgressiveRungs` is a :class:`~hpsearch.driver.search.rungs.Rungs` whose
:meth:`~ProgressiveRungs.judge` also stops a trial at the current end, so the sweep's
scheduler, the planner's estimate and the replay take it from
:func:`~hpsearch.driver.search.rules.make_rungs` like the other rules. Its state (every
score a trial reported, the rung records, the end) is plain data; a resumed sweep seeds it
from the study's intermediate values (:meth:`~ProgressiveRungs.seed_from`), which reopen
every level the sweep had opened.

Example:
    >>> rungs = ProgressiveRungs(milestones=(1, 3, 9), max_t=27, reduction_factor=3,
    ...                          mode="min")
    >>> rungs.end
    3
    >>> rungs.judge("c", 1, 0.9), rungs.judge("c", 2, 0.8)
    (False, False)
    >>> [rungs.judge("a", t, v) for t, v in ((1, 0.5), (2, 0.45), (3, 0.4))]  # a ends at 3
    [False, False, True]
    >>> rungs.judge("c", 3, 0.3), rungs.end  # behind a at 1, ahead of it at 3: 9 opens
    (False, 9)
"""

from __future__ import annotations

import bisect
import math
from typing import Any, Mapping, Sequence

from hpsearch.driver.search.rungs import Rungs, _lerp_quantile

__all__ = ["ProgressiveRungs"]

#: The percentile of the crossing gaps that is taken as noise (the paper's N).
NOISE_PERCENTILE = 90.0


class ProgressiveRungs(Rungs):
    """The rung records of PASHA: one bracket of ASHA whose end grows (module docstring).

    Args:
        milestones: ASHA's rungs below ``max_t``, ascending.
        max_t: The space's ``max_t``: the end can grow no further.
        reduction_factor: Keep the top ``1/reduction_factor`` at each rung.
        mode: ``min`` or ``max``.

    Attributes:
        levels: The rungs and ``max_t``: the ends the sweep can have.
        end: Where trials end now: the second level at first (``max_t`` when there is
            one rung or none).
        curves: ``{trial key: {t: score}}``: every report, as a score (higher is better).
    """

    def __init__(self, *, milestones: Sequence[float], max_t: float, reduction_factor: float,
                 mode: str):
        super().__init__(milestones=milestones, reduction_factor=reduction_factor, mode=mode)
        self.levels = (*self.milestones, max_t)
        self.end = self.levels[min(1, len(self.levels) - 1)]
        self.curves: dict[str, dict[float, float]] = {}
        self._gaps: list[float] = []  # crossing gaps between trials at the end, sorted
        self._at_end: dict[str, None] = {}  # trials whose crossings are in _gaps, in order

    def describe(self) -> str:
        return f"{super().describe()}, progressive: trials end at {self.end:g} for now"

    def judge(self, key: str, t: float, value: Any) -> bool:
        """As :meth:`Rungs.judge`, and ``True`` (stop) when ``t`` reaches the current end,
        after a trial that reaches it has been compared (the end may grow, and a trial
        then goes on if ASHA keeps it at the rung it reached)."""
        self.curves.setdefault(key, {})[t] = self.score(value)
        stopped = super().judge(key, t, value)
        if t < self.end:
            return stopped
        self._arrive(key)
        if self._disagree():
            self._grow()
        return stopped or t >= self.end

    def seed(self, key: str, milestone: float, value: Any) -> None:
        """A report from before this run: kept in the trial's curve, and recorded at its
        rung when ``milestone`` is one."""
        self.curves.setdefault(key, {})[milestone] = self.score(value)
        super().seed(key, milestone, value)

    def seed_from(self, values: Mapping[str, Mapping[float, Any]]) -> int:
        """:meth:`seed` every ``{trial key: {t: value}}`` (every report, not only the
        rungs'), then reopen the levels the sweep had opened: the end grows past a level
        some trial reported beyond, or whose two top levels disagree."""
        seeded = super().seed_from(values)
        while self.end != self.levels[-1]:
            reached = [k for k, curve in self.curves.items() if max(curve) >= self.end]
            for key in reached:
                self._arrive(key)
            beyond = any(max(curve) > self.end for curve in self.curves.values())
            if not (beyond or self._disagree()):
                break
            self._grow()
        return seeded

    def _grow(self) -> None:
        self.end = self.levels[self.levels.index(self.end) + 1]
        self._gaps, self._at_end = [], {}

    def _arrive(self, key: str) -> None:
        """Add the crossings of ``key``'s curve with every trial already at the end."""
        if key in self._at_end:
            return
        mine = self.curves[key]
        for other in self._at_end:
            for gap in _crossing_gaps(mine, self.curves[other], until=self.end):
                bisect.insort(self._gaps, gap)
        self._at_end[key] = None

    def epsilon(self) -> float:
        """The noise: the 90th percentile of the crossing gaps at the end (0 if none)."""
        return _lerp_quantile(self._gaps, NOISE_PERCENTILE / 100) if self._gaps else 0.0

    def _disagree(self) -> bool:
        """Whether two trials at the end changed places between the level below it and
        the end by more than :meth:`epsilon` at both."""
        if self.end == self.levels[0] or self.end not in self.recorded:
            return False
        below, at_end = self.recorded[self.levels[self.levels.index(self.end) - 1]], \
            self.recorded[self.end]
        pairs = [(below[k], at_end[k]) for k in at_end if k in below]
        pairs = [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]
        eps = self.epsilon()
        pairs.sort()  # ascending at the lower level
        lows = [low for low, _ in pairs]
        # worst[k]: the lowest score at the end among the trials from k on (ahead at low)
        worst = [math.inf] * (len(pairs) + 1)
        for k in range(len(pairs) - 1, -1, -1):
            worst[k] = min(worst[k + 1], pairs[k][1])
        for low_i, high_i in pairs:  # is a trial ahead of i by > eps at low behind it at the end?
            ahead = bisect.bisect_right(lows, low_i + eps)
            if high_i - worst[ahead] > eps:
                return True
        return False


def _crossing_gaps(a: Mapping[float, float], b: Mapping[float, float], *,
                   until: float) -> list[float]:
    """The gaps between curves ``a`` and ``b`` just after each time they cross, over the
    times both reported before ``until`` (a crossing at the end itself is what is judged,
    not noise)."""
    times = sorted(t for t in a if t in b and t < until)
    out, before = [], None
    for t in times:
        diff = a[t] - b[t]
        if not math.isfinite(diff):
            continue
        if before is not None and diff * before < 0:
            out.append(abs(diff))
        if diff != 0:
            before = diff
    return out
