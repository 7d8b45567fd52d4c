"""Several objectives: which points are on the front, their order, and MO-ASHA's rung rule.

Plain functions over score vectors, higher-is-better in every coordinate (a ``min``
objective's values negated), and one class of rung records, :class:`ParetoRungs`, with the
interface of :class:`~hpsearch.driver.search.rungs.Rungs`: the sweep's scheduler, the
tables (which trials are on the front) and a simulator replaying recorded curves all use
these same few lines.

**The order** (:func:`pareto_order`) is non-dominated sorting, as MO-ASHA ranks a rung
(Schmucker et al. 2021; Syne Tune's ``MOASHA`` with its default ``NonDominatedPriority``):
the first front (points no other point dominates), then the front of what remains, and so
on. Within a front, points are taken in the greedy farthest-point order of an epsilon-net
(Clarkson 2005, as Syne Tune orders a front), so that the first few of a front spread
along it instead of crowding one end. Unlike Syne Tune, whose net starts at a random
point, this one is deterministic: it starts at the front's best point on the first
objective, measures distances with each objective scaled to the rung's range, and breaks
equal distances by arrival (the earlier point first).

**The rule** (:meth:`ParetoRungs.judge`): a trial reaching a rung is placed in the order
of the points recorded there before it plus its own, and continues when it is among the
top ``ceil(n / reduction_factor)`` of those ``n`` points (its position ``p``, 0 for the
best, below ``n / reduction_factor``). That is the share single-objective ASHA keeps;
Syne Tune's MOASHA keeps one more at exact multiples (``p / n <= 1 / rf``), so that with
``reduction_factor: 2`` it lets a trial dominated by the only other one at its rung go
on. The first trial at a rung always continues; a
report with a non-finite objective is recorded and stopped (unless first). A report that
passes several rungs is judged at the highest, each trial once per rung, as in
:class:`~hpsearch.driver.search.rungs.Rungs`.

Example:
    >>> pareto_order([(-0.5, 1.0), (-0.2, 0.5), (-0.9, 3.0), (-0.6, 0.9)])  # (-loss, speed)
    [1, 2, 0, 3]
    >>> rungs = ParetoRungs(milestones=(1,), reduction_factor=2, modes=("min", "max"))
    >>> [rungs.judge(k, 1, v) for k, v in (("a", (0.5, 1.0)), ("b", (0.9, 0.5)),
    ...                                     ("c", (0.2, 3.0)))]
    [False, True, False]
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from hpsearch.space.spec import dominates

__all__ = ["ParetoRungs", "dominates", "fronts", "pareto_order"]

Point = Sequence[float]


def fronts(points: Sequence[Point]) -> list[list[int]]:
    """Indices of ``points`` front by front: the non-dominated ones first, then those only
    they dominate, and so on (each front in index order).

    Example:
        >>> fronts([(1, 1), (2, 2), (0, 3), (0, 0)])
        [[1, 2], [0], [3]]
    """
    left = list(range(len(points)))
    out = []
    while left:
        front = [i for i in left if not any(dominates(points[j], points[i]) for j in left)]
        out.append(front)
        left = [i for i in left if i not in front]
    return out


def _spread(points: Sequence[Point], front: list[int], scale: Sequence[float]) -> list[int]:
    """``front`` in the greedy farthest-point order (module docstring)."""
    def distance(i: int, j: int) -> float:
        return math.sqrt(sum(((points[i][d] - points[j][d]) / scale[d]) ** 2
                             for d in range(len(scale))))

    first = max(front, key=lambda i: (points[i][0], -i))
    order, left = [first], [i for i in front if i != first]
    nearest = {i: distance(i, first) for i in left}
    while left:
        pick = max(left, key=lambda i: (nearest[i], -i))
        order.append(pick)
        left.remove(pick)
        for i in left:
            nearest[i] = min(nearest[i], distance(i, pick))
    return order


def pareto_order(points: Sequence[Point]) -> list[int]:
    """Indices of ``points``, best first: front by front, each front spread (module doc)."""
    if not points:
        return []
    dims = len(points[0])
    scale = []
    for d in range(dims):
        values = [p[d] for p in points]
        scale.append((max(values) - min(values)) or 1.0)
    return [i for front in fronts(points) for i in _spread(points, front, scale)]


class ParetoRungs:
    """The rung records of one MO-ASHA bracket (module docstring).

    Args:
        milestones: Rungs in ``time_attr`` units, ascending.
        reduction_factor: Keep about the top ``1/reduction_factor`` at each rung.
        modes: ``min`` or ``max`` per objective, in the objectives' order.

    Attributes:
        recorded: ``{milestone: {trial key: score vector or None}}`` in arrival order
            (``None``: a report with a non-finite objective).
    """

    def __init__(self, *, milestones: Sequence[float], reduction_factor: float,
                 modes: Sequence[str]):
        if not modes or any(m not in ("min", "max") for m in modes):
            raise ValueError(f"modes must be 'min' or 'max' each (got {list(modes)!r})")
        self.milestones = tuple(sorted(milestones))
        self.reduction_factor = reduction_factor
        self.signs = tuple(-1.0 if m == "min" else 1.0 for m in modes)
        self.recorded: dict[float, dict[str, tuple[float, ...] | None]] = {
            m: {} for m in self.milestones}

    def score(self, values: Sequence[Any]) -> tuple[float, ...] | None:
        """``values`` as a higher-is-better vector, or ``None`` if any is not finite."""
        try:
            out = tuple(s * float(v) for s, v in zip(self.signs, values, strict=True))
        except (TypeError, ValueError):
            return None
        return out if all(math.isfinite(x) for x in out) else None

    def describe(self) -> str:
        """One line for Tune's status: the rungs."""
        return f"MO-ASHA (rungs {', '.join(map(str, self.milestones))})"

    def judge(self, key: str, t: float, values: Sequence[Any]) -> bool:
        """Record trial ``key``'s objectives ``values`` at ``t``; whether it stops there."""
        milestone = next((m for m in reversed(self.milestones)
                          if t >= m and key not in self.recorded[m]), None)
        if milestone is None:
            return False
        before = [p for p in self.recorded[milestone].values() if p is not None]
        score = self.score(values)
        self.recorded[milestone][key] = score
        if not before:
            return False
        if score is None:
            return True
        points = [*before, score]
        position = pareto_order(points).index(len(points) - 1)
        return position >= len(points) / self.reduction_factor

    def seed(self, key: str, milestone: float, values: Sequence[Any]) -> None:
        """Record what a trial reached at ``milestone`` before (a resumed sweep's study),
        without a decision. Unknown milestones are ignored."""
        if milestone in self.recorded and key not in self.recorded[milestone]:
            self.recorded[milestone][key] = self.score(values)

    def seed_from(self, values: Mapping[str, Mapping[float, Sequence[Any]]]) -> int:
        """:meth:`seed` every ``{trial key: {milestone: values}}``; returns how many."""
        before = sum(map(len, self.recorded.values()))
        for key, at in values.items():
            for milestone, point in at.items():
                self.seed(key, milestone, point)
        return sum(map(len, self.recorded.values())) - before
