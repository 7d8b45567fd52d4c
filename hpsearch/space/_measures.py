"""What each trial measures, and where it is written: ``objective`` (one mapping, or a
list of them), ``constraints`` and ``track``.

::

    objective:
      - {metric: val_loss, mode: min}
      - {metric: samples_per_s, mode: max}
    constraints:
      - {metric: val_accuracy, min: 0.5}
      - {metric: peak_mem_mb, max: 70000}

A single mapping under ``objective`` means what it always meant. Each problem is reported
with its key path (``objective[1].mode``, ``constraints[0]``): a metric named twice, a
``mode`` missing, a constraint with neither ``min`` nor ``max``, or with ``min`` above
``max``; with several objectives, a scheduler that cannot rank them (:func:`several_fit`).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Mapping

from hpsearch.space._schema import BAD, Report, got, ok
from hpsearch.space._yaml import REJECTED, Index
from hpsearch.space.spec import TRIAL_COLUMNS, Constraint, MlflowTrack, Objective, Track

__all__ = ["EXTRAS", "read_constraints", "read_objectives", "read_track", "several_fit"]

_OBJECTIVE = "{metric: val_loss, mode: min}"
_CONSTRAINT = "{metric: val_accuracy, min: 0.5}"


def _objective(item: Any, path: tuple, report: Report) -> Any:
    section = report.mapping(item, path, example=_OBJECTIVE)
    if section is BAD:
        return BAD
    report.reject_unknown_keys(section, path, ("metric", "mode"))
    metric = report.text(section, path, "metric")
    mode = report.option(section, path, "mode", ("min", "max"))
    return Objective(metric=metric, mode=mode) if ok(metric, mode) else BAD


def read_objectives(raw: Mapping, report: Report) -> Any:
    """``(first objective, the others)`` from ``raw["objective"]``, or :data:`BAD`."""
    value = raw.get("objective")
    path = ("objective",)
    if value is REJECTED:
        return BAD
    if value is None:
        what = "is missing" if "objective" not in raw else "is null"
        return report.add(path, "missing", f"required section {what}; add e.g. "
                          f"`objective: {_OBJECTIVE}`, or a list of them for several")
    if isinstance(value, Mapping):
        one = _objective(value, path, report)
        return BAD if one is BAD else (one, ())
    if not isinstance(value, list) or not value:
        return report.add(path, "type", f"expected a mapping such as {_OBJECTIVE}, or a "
                          f"non-empty list of them {got(value)}")
    objectives = [_objective(item, path + (Index(i),), report) for i, item in enumerate(value)]
    seen: dict[str, int] = {}
    for i, objective in enumerate(objectives):
        if objective is BAD:
            continue
        if objective.metric in seen:
            report.add(path + (Index(i), "metric"), "duplicate",
                       f"`{objective.metric}` is already objective[{seen[objective.metric]}]; "
                       "each objective names its own metric")
            objectives[i] = BAD
        seen.setdefault(objective.metric, i)
    if not ok(*objectives):
        return BAD
    return objectives[0], tuple(objectives[1:])


def _constraint(item: Any, path: tuple, report: Report) -> Any:
    section = report.mapping(item, path, example=_CONSTRAINT)
    if section is BAD:
        return BAD
    report.reject_unknown_keys(section, path, ("metric", "min", "max"))
    metric = report.text(section, path, "metric")
    low = report.number(section, path, "min", default=None)
    high = report.number(section, path, "max", default=None)
    if not ok(metric, low, high):
        return BAD
    if low is None and high is None:
        return report.add(path, "missing", f"a constraint needs `min`, `max` or both, e.g. "
                          f"{{metric: {metric}, min: 0.5}}")
    if low is not None and high is not None and low > high:
        return report.add(path + ("min",), "range",
                          f"min ({low:g}) is above max ({high:g}): no value can keep both")
    return Constraint(metric=metric, min=low, max=high)


def read_constraints(raw: Mapping, report: Report) -> Any:
    """The ``constraints`` list (empty when absent), or :data:`BAD`."""
    value = raw.get("constraints")
    path = ("constraints",)
    if value is None:
        return ()
    if value is REJECTED:
        return BAD
    if not isinstance(value, list):
        return report.add(path, "type", f"expected a list of constraints such as "
                          f"[{_CONSTRAINT}] {got(value)}")
    constraints = [_constraint(item, path + (Index(i),), report) for i, item in enumerate(value)]
    return tuple(constraints) if ok(*constraints) else BAD


#: Each tracker's Python package, and the extra that installs it.
EXTRAS = {"mlflow": ("mlflow", "hpsearch[mlflow]"),
          "tensorboard": ("tensorboard", "hpsearch[tensorboard]")}
_KEYS = ("mlflow", "tensorboard")
_EXAMPLE = "{mlflow: {tracking_uri: 'http://mlflow.internal:5000'}, tensorboard: true}"


def read_track(raw: Mapping, report: Report) -> Any:
    """The :class:`Track` of ``raw``'s ``track:`` section, or :data:`BAD`."""
    path = ("track",)
    section = report.section(raw, "track", example=_EXAMPLE)
    if section is BAD:
        return BAD
    if "wandb" in section:
        return report.add(path + ("wandb",), "unknown_key",
                          "Weights & Biases is not a tracker hpsearch writes to yet; use "
                          "`mlflow` or `tensorboard`, or `hpsearch export` into either")
    report.reject_unknown_keys(section, path, _KEYS)
    mlflow = _read_mlflow(section, report)
    tensorboard = report.flag(section, path, "tensorboard", default=False)
    if not ok(mlflow, tensorboard):
        return BAD
    track = Track(mlflow=mlflow, tensorboard=tensorboard)
    for key, wanted in (("mlflow", mlflow is not None), ("tensorboard", tensorboard)):
        package, extra = EXTRAS[key]
        if wanted and importlib.util.find_spec(package) is None:
            report.add(path + (key,), "track", f"needs the `{package}` package, which is not "
                       f"installed here: pip install '{extra}'")
    return track


def _read_mlflow(section: Mapping, report: Report) -> Any:
    path = ("track", "mlflow")
    value = section.get("mlflow")
    if value is None or value is False:
        return None
    if value is True:
        return MlflowTrack()
    if not isinstance(value, Mapping):
        return report.add(path, "type", "expected true or a mapping such as "
                          f"{{tracking_uri: 'http://mlflow.internal:5000'}} {got(value)}")
    report.reject_unknown_keys(value, path, ("tracking_uri", "experiment"))
    uri = report.text(value, path, "tracking_uri", default=None)
    experiment = report.text(value, path, "experiment", default=None)
    if not ok(uri, experiment):
        return BAD
    return MlflowTrack(tracking_uri=uri, experiment=experiment)


def several_fit(parts: dict, scheduler: Any, searched: Any, fixed: Any,
                 report: Report) -> bool:
    """Whether several objectives fit the scheduler (MO-ASHA is one bracket, not PASHA);
    each objective's column name is free."""
    if scheduler.brackets > 1 or scheduler.progressive:
        key, fix = (("progressive", "PASHA ranks one objective: leave progressive out")
                    if scheduler.progressive else ("brackets", "set it to 1 (got "
                                                   f"{scheduler.brackets})"))
        report.add(("scheduler", key), "conflict", f"several objectives are stopped by "
                   f"MO-ASHA, one bracket: {fix}")
        return False
    taken = {*TRIAL_COLUMNS, "feasible", "pareto", *(p.name for p in searched), *fixed}
    for i, o in enumerate((parts["objective"], *parts["more_objectives"])):
        if o.metric in taken:
            report.add(("objective", Index(i), "metric"), "name",
                       f"`{o.metric}` is a column of trials.parquet already (a parameter or "
                       "one of hpsearch's); each objective gets a column of its name")
    return True
