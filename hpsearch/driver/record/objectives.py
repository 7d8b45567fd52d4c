"""One objective or several, and constraints, as the sweep's Optuna study records them.

A study of one objective stores a trial's reports as Optuna intermediate values, which its
pruners and hpsearch's resume read. Optuna refuses ``Trial.report`` in a study of several
objectives, so there each report's values go to a user attribute of their own,
``report:<step>`` (a list, one value per objective, in the order of the space's
``objective`` list): one small journal line per report, as ``report`` writes. The
:func:`reported` reader gives either kind back as ``{study step: values}``, so the
resume's rung seeding and the recovery of lost reports read both the same way.

A trial's constraints are told to the samplers as Optuna wants them: one number per
constraint, ``<= 0`` where the bound holds (:func:`violations`). :func:`set_constraints`
stores them before the record tells the trial's end: as ``Trial.set_constraint`` (Optuna
5, whose samplers read ``FrozenTrial.constraints``) and in the ``constraints`` user
attribute, which the ``constraints_func`` of :func:`sampler_constraints` reads back for
Optuna 4's samplers. TPE, NSGA-II and GP then learn that a region is infeasible instead of
being told nothing. On Optuna 4, a trial with no stored constraints counts as breaking
every bound.

Example:
    >>> from hpsearch.space.spec import Constraint, Objective
    >>> directions((Objective("val_loss", "min"), Objective("samples_per_s", "max")))
    ['minimize', 'maximize']
    >>> violations((Constraint("val_accuracy", min=0.5),), {"val_accuracy": 0.4})
    [0.09999999999999998]
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import optuna

from hpsearch.errors import HpsearchError
from hpsearch.store.reports import FIRST_STEP_AT
from hpsearch.space.spec import Constraint, Objective

__all__ = ["CONSTRAINTS_ATTR", "REPORT_ATTR", "ConstraintMetricMissing", "constraints_func",
           "check_first_report", "directions", "feasible", "missing_metrics", "objective_values",
           "report_values",
           "reported", "sampler_constraints", "set_constraints", "study_value",
           "violations"]

#: The user attribute prefix of a report in a study of several objectives.
REPORT_ATTR = "report:"
#: The user attribute holding a trial's constraint violations (:func:`violations`).
CONSTRAINTS_ATTR = "constraints"


class ConstraintMetricMissing(HpsearchError):
    """A trial's first report lacks a metric the objectives or constraints name."""

    exit_code = 2


def directions(objectives: Sequence[Objective]) -> list[str]:
    """Optuna's direction for each objective, in order."""
    return ["minimize" if o.mode == "min" else "maximize" for o in objectives]


def report_values(trial: Any, step: int, values: Sequence[float]) -> None:
    """Record one report of ``trial`` (an ``optuna.Trial``) at ``step``: an intermediate
    value for one objective, the ``report:<step>`` attribute for several."""
    if len(values) == 1:
        trial.report(float(values[0]), step)
    else:
        trial.set_user_attr(f"{REPORT_ATTR}{int(step)}", [float(v) for v in values])


def reported(trial: Any) -> dict[int, Any]:
    """``{study step: value}`` of a ``FrozenTrial``'s reports: floats for a study of one
    objective, tuples (one value per objective) for one of several."""
    attrs = trial.user_attrs
    several = {int(k[len(REPORT_ATTR):]): tuple(float(v) for v in values)
               for k, values in attrs.items() if k.startswith(REPORT_ATTR)}
    if several:
        return dict(sorted(several.items()))
    return dict(trial.intermediate_values)


def objective_values(report: Mapping[str, Any], objectives: Sequence[Objective]
                     ) -> list[float] | None:
    """The report's value of each objective, or ``None`` unless all are finite numbers."""
    try:
        values = [float(report.get(o.metric)) for o in objectives]
    except (TypeError, ValueError):
        return None
    return values if all(math.isfinite(v) for v in values) else None


def missing_metrics(report: Mapping[str, Any], objectives: Iterable[Objective],
                    constraints: Iterable[Constraint] = ()) -> list[str]:
    """Key paths (``objective[1].metric``, ``constraints[0].metric``) of the metrics a
    report lacks: checked on a trial's first report, so that a constraint on a metric the
    trainable never reports is an error there and not a bound that silently holds. A
    metric reported as null counts as missing: ``peak_mem_mb`` is null on CPUs, and a
    bound on it would make every trial infeasible."""
    out = [f"objective[{i}].metric: {o.metric}" for i, o in enumerate(objectives)
           if report.get(o.metric) is None]
    out += [f"constraints[{i}].metric: {c.metric}" for i, c in enumerate(constraints)
            if report.get(c.metric) is None]
    return out


def check_first_report(report: Mapping[str, Any], objectives: Sequence[Objective],
                       constraints: Sequence[Constraint] = ()) -> None:
    """Raise :class:`ConstraintMetricMissing` (one line, with the key paths and what the
    report has) when the first report lacks a metric the space names. A sweep of one
    objective and no constraints is not checked here: a trial that never reports its
    objective fails at its end, with what it did report."""
    if len(objectives) < 2 and not constraints:
        return
    import difflib

    from ray.tune.result import AUTO_RESULT_KEYS

    missing = missing_metrics(report, objectives, constraints)
    if missing:
        # What the trainable reported: not Tune's own keys, not hpsearch's markers.
        metrics = sorted(k for k, v in report.items() if isinstance(v, (int, float))
                         and not isinstance(v, bool) and "/" not in k
                         and k not in AUTO_RESULT_KEYS and k not in (FIRST_STEP_AT, "step"))
        hints = []
        for path in missing:
            close = difflib.get_close_matches(path.split(": ", 1)[1], metrics, n=1)
            hints.append(path + (f" (did you mean `{close[0]}`?)" if close else ""))
        raise ConstraintMetricMissing(
            f"the trial's first report has no {'; no '.join(hints)}; it reports "
            f"{', '.join(metrics) or 'no metrics'}. Report that metric from the trainable, "
            "or change the space file")


def study_value(objectives: Sequence[Objective], *, final_value: Any,
                last: Mapping[str, Any] | None) -> Any:
    """What the study is told at a trial's end: the row's final value for one objective;
    for several, each objective's value in the trial's last report (a list, in order)."""
    if len(objectives) > 1:
        return [(last or {}).get(o.metric) for o in objectives]
    return final_value


def violations(constraints: Sequence[Constraint], metrics: Mapping[str, Any]) -> list[float]:
    """One number per constraint, ``<= 0`` where ``metrics`` keep its bound (a metric that
    is missing or not a number breaks it: ``inf``)."""
    return [c.violation(metrics.get(c.metric)) for c in constraints]


def feasible(constraints: Sequence[Constraint], metrics: Mapping[str, Any]) -> bool:
    """Whether ``metrics`` keep every bound (``True`` without constraints)."""
    return all(v <= 0 for v in violations(constraints, metrics))


def set_constraints(trial: Any, values: Sequence[float]) -> None:
    """Store a running ``optuna.Trial``'s constraint violations where the samplers read
    them (module docstring); infinite and NaN ones become ``1e300``, which samplers can
    compute with."""
    capped = [1e300 if math.isnan(float(v)) else min(float(v), 1e300) for v in values]
    trial.set_user_attr(CONSTRAINTS_ATTR, capped)
    if hasattr(trial, "set_constraint"):  # Optuna 5: the samplers read FrozenTrial.constraints
        for i, value in enumerate(capped):
            trial.set_constraint(str(i), value)


def sampler_constraints(count: int) -> dict[str, Any]:
    """The keyword arguments an Optuna sampler needs to learn from ``count`` constraints:
    none on Optuna 5 (:func:`set_constraints` told the trial), ``constraints_func`` on
    Optuna 4 (deprecated since 5.0)."""
    if not count or hasattr(optuna.trial.Trial, "set_constraint"):
        return {}
    return {"constraints_func": constraints_func(count)}


def constraints_func(count: int) -> Any:
    """The ``constraints_func`` for Optuna's samplers, for ``count`` constraints: a
    trial's stored :data:`CONSTRAINTS_ATTR`, or every bound broken when it has none.
    Infinite violations are capped, since Optuna's samplers compute with them."""
    broken = [1e300] * count

    def read(trial: Any) -> list[float]:
        stored = trial.user_attrs.get(CONSTRAINTS_ATTR)
        if not isinstance(stored, list) or len(stored) != count:
            return list(broken)
        return [min(float(v), 1e300) if not math.isnan(float(v)) else 1e300 for v in stored]

    return read
