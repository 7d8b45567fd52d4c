"""Which rung rule a sweep's ``scheduler`` section asks for: the one place that tells
them apart, so the sweep's scheduler, the planner's estimate and the replay share it.

* one bracket of ASHA: :class:`~hpsearch.driver.search.rungs.Rungs` (``brackets: 1``);
* asynchronous Hyperband: :class:`~hpsearch.driver.search.rungs.Brackets` (more);
* PASHA: :class:`~hpsearch.driver.search.pasha.ProgressiveRungs` (``progressive: true``);
* MO-ASHA: :class:`~hpsearch.driver.search.pareto.ParetoRungs` (several objectives; the
  space's validation refuses brackets and PASHA with several).

All four have the same interface (``judge``, ``seed``, ``seed_from``, ``milestones``,
``describe``), and none imports Ray.
"""

from __future__ import annotations

from typing import Sequence

from hpsearch.driver.search.pareto import ParetoRungs
from hpsearch.driver.search.pasha import ProgressiveRungs
from hpsearch.driver.search.rungs import Brackets, Rungs
from hpsearch.space.spec import Scheduler

__all__ = ["RungRule", "make_rungs"]

#: A rung rule: what :func:`make_rungs` returns.
RungRule = Rungs | Brackets | ProgressiveRungs | ParetoRungs


def make_rungs(scheduler: Scheduler, *, modes: Sequence[str], seed: int | None = 0) -> RungRule:
    """The rung rule of a spec's ``scheduler`` section for objectives of ``modes`` (one
    per objective, in order); ``seed`` (``search.seed``) draws each trial's bracket."""
    if len(modes) > 1:
        return ParetoRungs(milestones=scheduler.rungs(),
                           reduction_factor=scheduler.reduction_factor, modes=tuple(modes))
    if scheduler.progressive:
        return ProgressiveRungs(milestones=scheduler.rungs(), max_t=scheduler.max_t,
                                reduction_factor=scheduler.reduction_factor, mode=modes[0])
    if scheduler.brackets == 1:
        return Rungs(milestones=scheduler.rungs(), reduction_factor=scheduler.reduction_factor,
                     mode=modes[0])
    return Brackets(grace_period=scheduler.grace_period, max_t=scheduler.max_t,
                    reduction_factor=scheduler.reduction_factor, brackets=scheduler.brackets,
                    mode=modes[0], seed=seed)
