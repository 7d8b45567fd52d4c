"""Optuna studies for analysis: the sweep's own, and one built in memory from the tables.

The study built here holds one ``COMPLETE`` trial per row of an equal-budget frame
(:func:`hpsearch.report._facts.equal_budget`), so Optuna's importance evaluators and plots
compare trials at the same budget instead of mixing a trial ASHA stopped after one epoch
with one that trained to the end.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from hpsearch.report._load import SweepData, load_sweep, python_value
from hpsearch.store.layout import SweepDir

__all__ = ["distributions", "equal_budget_study", "importances", "load_study", "storage_at"]


def distributions(data: SweepData) -> dict[str, Any]:
    """Optuna distributions of the searched parameters (from the space as run)."""
    import optuna.distributions as od

    out: dict[str, Any] = {}
    if data.spec is None:
        return out
    for p in data.spec.params:
        if p.type == "float":
            out[p.name] = od.FloatDistribution(p.low, p.high, log=p.log, step=p.step)
        elif p.type == "int":
            out[p.name] = od.IntDistribution(p.low, p.high, log=p.log, step=p.step)
        else:
            out[p.name] = od.CategoricalDistribution(list(p.choices))
    return out


def _param_value(dist, value: Any) -> Any:
    """A table cell as a value of ``dist`` (tables store mixed-type choices as strings)."""
    import optuna.distributions as od

    value = python_value(value)
    if value is None:
        return None
    if isinstance(dist, od.CategoricalDistribution):
        for choice in dist.choices:
            if choice == value or str(choice) == str(value):
                return choice
        return None
    if isinstance(dist, od.IntDistribution):
        return int(value)
    return float(value)


def equal_budget_study(data: SweepData | str | os.PathLike, frame=None, *,
                       milestone: Any = None):
    """An in-memory Optuna study of the sweep's trials at one budget.

    Args:
        data: The sweep (a directory, or data read by :func:`load_sweep`).
        frame: An equal-budget frame (``trial_id``, parameters, ``value``); computed with
            :func:`hpsearch.report.equal_budget` when omitted.

    Returns:
        The study (``None`` when too few trials reached a common budget). Its user
        attribute ``budget`` names the milestone; each trial carries ``trial_id``.
    """
    import optuna

    from hpsearch.report._facts import equal_budget

    if not isinstance(data, SweepData):
        data = load_sweep(data)
    if frame is None:
        milestone, frame = equal_budget(data)
    if frame is None or frame.empty:
        return None
    dists = distributions(data)
    direction = "minimize" if data.objective.mode == "min" else "maximize"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=direction, study_name=data.sweep.name)
    study.set_user_attr("budget", f"{data.time_attr} {milestone}")
    for row in frame.to_dict("records"):
        params, used = {}, {}
        for name, dist in dists.items():
            value = _param_value(dist, row.get(name))
            if value is not None:
                params[name], used[name] = value, dist
        try:
            study.add_trial(optuna.trial.create_trial(
                params=params, distributions=used, value=float(row["value"]),
                user_attrs={"trial_id": str(row["trial_id"])},
            ))
        except ValueError:  # a value outside the space (a table edited by hand): skip it
            continue
    return study


def importances(study) -> dict[str, float]:
    """Optuna's fANOVA importance of each parameter (normalised to sum to 1), seeded so
    the report is the same every time it is written. Parameters some trials lack (a
    ``when`` condition) are left out, as Optuna does."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
    return {k: float(v) for k, v in found.items()}


def load_study(sweep_dir: str | os.PathLike | SweepDir):
    """The sweep's own Optuna study as the driver saved it, or ``None`` when there is none
    or it cannot be opened.

    It opens whichever study file :class:`SweepDir` names and the sweep holds (the journal
    file, or the SQLite file of older sweeps), so a notebook that calls it keeps working
    when that storage changes. Nothing is created: a sweep without a study file gets
    ``None``.
    """
    import optuna

    sweep = sweep_dir if isinstance(sweep_dir, SweepDir) else SweepDir.of(sweep_dir)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for path in _study_files(sweep):
        try:
            storage = storage_at(path)
            names = optuna.get_all_study_names(storage=storage)
            if not names:
                continue
            name = sweep.name if sweep.name in names else names[0]
            return optuna.load_study(study_name=name, storage=storage)
        except Exception:  # noqa: BLE001 - an unreadable study is no study to show
            continue
    return None


def _study_files(sweep: SweepDir) -> list:
    """The study files the sweep directory names, that exist, in SweepDir's order."""
    found = []
    for attr in ("optuna", "optuna_sqlite", "study"):
        path = getattr(sweep, attr, None)
        if isinstance(path, os.PathLike) and os.path.isfile(path) and path not in found:
            found.append(path)
    return found


def storage_at(path: str | os.PathLike):
    """An Optuna storage for a study file: SQLite for ``.db``/``.sqlite``, else Optuna's
    journal file storage (what ``optuna-dashboard`` opens for a journal path)."""
    import optuna

    path = os.fspath(path)
    if path.endswith((".db", ".sqlite", ".sqlite3")):
        return optuna.storages.RDBStorage(f"sqlite:///{path}")
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(path))
