"""A trial this run of a sweep runs, as the study sees it: :class:`LiveTrial`.

Each trial the searcher starts (asked now, or a resumed sweep's unfinished trial continued)
is one :class:`LiveTrial` of the sweep's record: its ``optuna.Trial`` and the values it
told the study at each study step. :meth:`LiveTrial.report` is the one place a report
becomes a study step; the record calls it for every report Tune hands it, and for the
reports a resume recovers from checkpoints.

Example:
    >>> import optuna
    >>> from hpsearch.space import parse_space
    >>> spec = parse_space({"name": "s", "trainable": "digits",
    ...                     "objective": {"metric": "val_loss", "mode": "min"},
    ...                     "params": {"lr": 0.01}, "trials": {"num": 1},
    ...                     "scheduler": {"type": "asha", "max_t": 9, "grace_period": 1,
    ...                                   "reduction_factor": 3}})
    >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
    >>> live, at = LiveTrial(optuna.create_study().ask()), milestones(spec)
    >>> [live.report({"epoch": e, "val_loss": v}, spec, at) for e, v in ((0.5, 2.0), (1.2, 1.0))]
    [0, 1]
    >>> live.report({"epoch": 1.7, "val_loss": 0.9}, spec, at) is None  # step 1 is told already
    True
    >>> live.reported
    {0: 2.0, 1: 1.0}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from hpsearch.driver.record.objectives import (ConstraintMetricMissing, check_first_report,
                                               objective_values, report_values)
from hpsearch.driver.record.study import study_step
from hpsearch.space.spec import Spec
from hpsearch.store.reports import OBJECTIVE_MISSING

__all__ = ["LiveTrial", "milestones"]


def milestones(spec: Spec) -> tuple[float, ...]:
    """Where a report's study step is pinned: the ASHA rungs and ``max_t``."""
    return (*spec.scheduler.rungs(), spec.scheduler.max_t)


@dataclass
class LiveTrial:
    """One trial this run runs.

    Attributes:
        trial: Its ``optuna.Trial``.
        reported: ``{study step: value}`` it told the study (the tuple of every
            objective's value, for a study of several), its earlier runs' included.
        last: Its last report with every objective (the end is told from it).
        problem: Why the sweep cannot go on, from its first report: a metric that the
            space's other objectives or constraints name is missing.
    """

    trial: Any
    reported: dict[int, Any] = field(default_factory=dict)
    last: Mapping[str, Any] | None = None
    problem: str | None = None

    def report(self, result: Mapping[str, Any], spec: Spec,
               at: Sequence[float]) -> int | None:
        """Tell the study ``result``'s objective values at its study step
        (:func:`~hpsearch.driver.record.study.study_step`, pinned ``at`` the spec's
        :func:`milestones`), once per step; returns the
        step told, or ``None`` (no finite objective or time, or a step told before: a
        restarted trial reports its steps again)."""
        if result.get(OBJECTIVE_MISSING):
            return None
        try:
            t = float(result.get(spec.scheduler.result_key, result.get("training_iteration")))
        except (TypeError, ValueError):
            return None
        if self.last is None and self.problem is None:
            try:
                check_first_report(result, spec.objectives, spec.constraints)
            except ConstraintMetricMissing as exc:
                self.problem = str(exc)
        values = objective_values(result, spec.objectives)
        if t < 0 or values is None or not math.isfinite(t):
            return None
        self.last = result
        step = study_step(t, at, self.reported)
        if self.reported and step <= max(self.reported):
            return None
        report_values(self.trial, step, values)
        self.reported[step] = values[0] if len(values) == 1 else tuple(values)
        return step
