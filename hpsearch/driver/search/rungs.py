"""ASHA's rule as plain data: at which rung a trial is stopped.

Asynchronous successive halving (Li et al., 2020) as Ray Tune's ``_Bracket`` applies it
(``ray/tune/schedulers/async_hyperband.py``, one bracket): a trial that reaches a rung
is compared with the values recorded there *before* it, and stopped when its score is
below their ``1 - 1/reduction_factor`` quantile (linear interpolation, as
``numpy.nanpercentile``). The first trial at a rung always continues. A report that
passes several rungs at once is judged at the highest of them, and each trial is judged
once per rung.

The records are a dict per rung of ``{trial key: score}`` (higher is better), so a
resumed sweep rebuilds them from its study (:meth:`Rungs.seed`) and a simulator drives
them with made-up reports. This one class serves the sweep's scheduler
(:mod:`hpsearch.driver.search.schedulers`), the planner's cost estimate
(:mod:`hpsearch.driver.limits.plan`) and any replay of recorded curves.

**Brackets** (:class:`Brackets`, ``scheduler.brackets: N``) are asynchronous Hyperband as
Ray's ``AsyncHyperBandScheduler(brackets=N)`` runs it: bracket ``s`` is one
:class:`Rungs` whose first rung is ``grace_period * reduction_factor**s``, each trial is
judged in its own bracket only, and a trial lands in bracket ``s`` with Ray's softmax
probability ``exp(len(rungs_s)) / sum_j exp(len(rungs_j))`` (so the bracket with the
most rungs, the most aggressive, gets most trials). Ray draws the bracket from numpy's
global random state as the trial arrives; here it is a function of the trial's key and
``search.seed`` alone (:func:`bracket_draw`), so a resumed sweep puts each trial back in
its bracket whatever order the trials come back in, and a replay is reproducible.

Example:
    >>> rungs = Rungs(milestones=(1, 3), reduction_factor=3, mode="min")
    >>> [rungs.judge(key, 1, loss) for key, loss in (("a", 0.5), ("b", 0.9), ("c", 0.1))]
    [False, True, False]
    >>> rungs.cutoff(1)  # the 2/3 quantile of the scores -0.5, -0.9 and -0.1
    -0.3666666666666666
"""

from __future__ import annotations

import bisect
import hashlib
import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from hpsearch.space.spec import Objective, Scheduler

__all__ = ["Brackets", "Rungs", "bracket_draw", "milestones_of"]


def milestones_of(*, grace_period: float, max_t: float, reduction_factor: float) -> tuple:
    """The rungs below ``max_t``: ``grace_period * reduction_factor**k``, as Ray's bracket
    computes them (a rung at ``max_t`` itself never decides: a report there ends the trial).

    Example:
        >>> milestones_of(grace_period=1, max_t=9, reduction_factor=3)
        (1, 3)
    """
    out, k = [], 0
    while grace_period * reduction_factor ** k < max_t:
        out.append(grace_period * reduction_factor ** k)
        k += 1
    return tuple(out)


def _lerp_quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of an ascending list, as ``numpy.percentile``'s linear method
    computes it (the same two-sided formula, so ties with the cutoff fall the same way)."""
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    a, b, t = ordered[low], ordered[high], pos - low
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


class Rungs:
    """The rung records of one ASHA bracket.

    Args:
        milestones: Rungs in ``time_attr`` units, ascending (:func:`milestones_of`).
        reduction_factor: Keep the top ``1/reduction_factor`` at each rung.
        mode: ``min`` or ``max``: how the objective's values rank.

    Attributes:
        recorded: ``{milestone: {trial key: score}}``, scores higher-is-better (NaN kept,
            as Ray keeps it: the trial has been judged there, and the quantile skips it).
    """

    def __init__(self, *, milestones: Sequence[float], reduction_factor: float, mode: str):
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max' (got {mode!r})")
        self.milestones = tuple(sorted(milestones))
        self.quantile = (1 - 1 / reduction_factor) * 100 / 100
        self.sign = -1.0 if mode == "min" else 1.0
        self.recorded: dict[float, dict[str, float]] = {m: {} for m in self.milestones}
        self._finite: dict[float, list[float]] = {m: [] for m in self.milestones}

    @classmethod
    def of(cls, scheduler: Scheduler, objective: Objective) -> "Rungs":
        """The rungs of a spec's ``scheduler`` section for its ``objective``."""
        return cls(milestones=scheduler.rungs(), reduction_factor=scheduler.reduction_factor,
                   mode=objective.mode)

    def score(self, value: Any) -> float:
        """``value`` as a higher-is-better score (NaN for anything not a number)."""
        try:
            return self.sign * float(value)
        except (TypeError, ValueError):
            return math.nan

    def cutoff(self, milestone: float) -> float | None:
        """The score below which a trial reaching ``milestone`` now is stopped; ``None``
        while no finite score is recorded there."""
        finite = self._finite[milestone]
        return _lerp_quantile(finite, self.quantile) if finite else None

    def describe(self) -> str:
        """One line for Tune's status: the cutoff at each rung."""
        cuts = ", ".join(f"{m:g}: {self.cutoff(m)}" for m in self.milestones)
        return f"ASHA (cutoffs {cuts})"

    def judge(self, key: str, t: float, value: Any) -> bool:
        """Record a report of trial ``key`` at ``t`` (``time_attr`` units); returns whether
        the trial is stopped there. Only the highest rung at or below ``t`` at which the
        trial has no record yet judges it (as in Ray, a lower rung it skipped included)."""
        milestone = self._due(key, t)
        if milestone is None:
            return False
        score = self.score(value)
        cutoff = self.cutoff(milestone)
        self._record(key, milestone, score)
        return cutoff is not None and score < cutoff

    def seed(self, key: str, milestone: float, value: Any) -> None:
        """Record a value a trial reached at ``milestone`` before (a resumed sweep's
        history), without a decision. Unknown milestones are ignored."""
        if milestone in self.recorded and key not in self.recorded[milestone]:
            self._record(key, milestone, self.score(value))

    def seed_from(self, values: Mapping[str, Mapping[float, Any]]) -> int:
        """:meth:`seed` every ``{trial key: {milestone: value}}``; returns how many."""
        before = sum(map(len, self.recorded.values()))
        for key, at in values.items():
            for milestone, value in at.items():
                self.seed(key, milestone, value)
        return sum(map(len, self.recorded.values())) - before

    def _due(self, key: str, t: float) -> float | None:
        for milestone in reversed(self.milestones):  # as Ray's bracket walks them
            if t >= milestone and key not in self.recorded[milestone]:
                return milestone
        return None

    def _record(self, key: str, milestone: float, score: float) -> None:
        self.recorded[milestone][key] = score
        if not math.isnan(score):
            bisect.insort(self._finite[milestone], score)


def bracket_draw(key: str, seed: int | None) -> float:
    """A number in ``[0, 1)`` that depends on ``key`` and ``seed`` only (BLAKE2b of both:
    Python's ``hash`` of a string changes with each process), uniform over keys.

    Example:
        >>> bracket_draw("t00001", 0) == bracket_draw("t00001", 0) != bracket_draw("t00001", 1)
        True
    """
    digest = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2 ** 64


class Brackets:
    """Asynchronous Hyperband: ``brackets`` brackets of :class:`Rungs` (module docstring).

    Args:
        grace_period, max_t, reduction_factor: As for one bracket; bracket ``s`` starts at
            ``grace_period * reduction_factor**s``.
        brackets: How many; each must have a rung below ``max_t`` (``ValueError``).
        mode: ``min`` or ``max``.
        seed: Part of each trial's draw (:func:`bracket_draw`): the sweep's ``search.seed``.

    Example:
        >>> b = Brackets(grace_period=1, max_t=27, reduction_factor=3, brackets=3, mode="min")
        >>> [r.milestones for r in b.brackets], [round(p, 3) for p in b.shares]
        ([(1, 3, 9), (3, 9), (9,)], [0.665, 0.245, 0.09])
    """

    def __init__(self, *, grace_period: float, max_t: float, reduction_factor: float,
                 brackets: int, mode: str, seed: int | None = 0):
        self.brackets = tuple(
            Rungs(milestones=milestones_of(grace_period=grace_period * reduction_factor ** s,
                                           max_t=max_t, reduction_factor=reduction_factor),
                  reduction_factor=reduction_factor, mode=mode)
            for s in range(brackets))
        if brackets < 1 or not self.brackets[-1].milestones:
            raise ValueError(f"brackets must be >= 1 and leave bracket {brackets - 1} a rung "
                             f"below max_t {max_t} (got {brackets})")
        sizes = [len(b.milestones) for b in self.brackets]
        weights = [math.exp(n - max(sizes)) for n in sizes]  # Ray's softmax over sizes
        self.shares = [w / sum(weights) for w in weights]
        self._upper = [sum(self.shares[:s + 1]) for s in range(brackets)]
        self.seed_value = seed
        self.milestones = tuple(sorted({m for b in self.brackets for m in b.milestones}))
        self._of: dict[str, int] = {}

    def index(self, key: str) -> int:
        """The bracket of trial ``key``: where its draw falls among the cumulative shares."""
        if key not in self._of:
            at = bisect.bisect_right(self._upper, bracket_draw(key, self.seed_value))
            self._of[key] = min(at, len(self.brackets) - 1)
        return self._of[key]

    def bracket(self, key: str) -> Rungs:
        """The rungs that judge trial ``key``."""
        return self.brackets[self.index(key)]

    def describe(self) -> str:
        """One line for Tune's status: each bracket's cutoffs."""
        return "; ".join(b.describe() for b in self.brackets)

    def judge(self, key: str, t: float, value: Any) -> bool:
        """:meth:`Rungs.judge` in the trial's own bracket."""
        return self.bracket(key).judge(key, t, value)

    def seed(self, key: str, milestone: float, value: Any) -> None:
        """:meth:`Rungs.seed` in the trial's own bracket (other brackets' rungs ignored)."""
        self.bracket(key).seed(key, milestone, value)

    def seed_from(self, values: Mapping[str, Mapping[float, Any]]) -> int:
        """:meth:`seed` every ``{trial key: {milestone: value}}``; returns how many."""
        before = sum(len(r) for b in self.brackets for r in b.recorded.values())
        for key, at in values.items():
            for milestone, value in at.items():
                self.seed(key, milestone, value)
        return sum(len(r) for b in self.brackets for r in b.recorded.values()) - before
