"""A sweep's files, read once and tolerantly, for the report.

A report is most wanted when something went wrong, so reading never stops at a missing or
damaged file: what could not be read becomes a note, and the report shows the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hpsearch.errors import HpsearchError, SweepNotFoundError
from hpsearch.space.spec import Objective, Spec
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import driver_died, read_manifest
from hpsearch.store.tables import python_value

__all__ = ["SweepData", "load_sweep", "python_value"]

#: The trial table's fixed columns, for an empty frame when there is no table yet.
_EMPTY_TRIAL_COLUMNS = ("trial_id", "status", "final_value", "best_value", "steps", "epochs",
                        "wall_s", "worker_s", "gpu_s", "precision_used", "error",
                        "started_at", "ended_at")


@dataclass
class SweepData:
    """What the report is made from.

    Attributes:
        sweep: The sweep directory.
        manifest: ``manifest.json`` (empty if unreadable).
        spec: The space as run, or ``None`` if ``space.yaml`` cannot be loaded.
        trials: ``trials.parquet`` (an empty frame when there is none).
        history: ``history.parquet`` (an empty frame when there is none).
        notes: What could not be read, in words.
    """

    sweep: SweepDir
    manifest: dict[str, Any]
    spec: Spec | None
    trials: Any
    history: Any
    notes: list[str] = field(default_factory=list)

    @property
    def evals(self) -> Any:
        """The history's evaluations: without the ``log_every`` rows (``evaluated`` False),
        which hold training metrics only. ASHA and the study saw these rows alone."""
        history = self.history
        if "evaluated" not in history.columns:
            return history
        return history[history["evaluated"].fillna(True).astype(bool)]

    # --- what the space and manifest say, with fallbacks --------------------------------

    @property
    def objective(self) -> Objective:
        if self.spec is not None:
            return self.spec.objective
        raw = self.manifest.get("objective")
        raw = raw if isinstance(raw, dict) else {}
        return Objective(str(raw.get("metric") or "objective"),
                         "max" if raw.get("mode") == "max" else "min")

    @property
    def params(self) -> list[str]:
        """Searched parameters that have a column in the trial table, in space order."""
        if self.spec is not None:
            names = [p.name for p in self.spec.params]
        else:  # the columns between `status` and `final_value` (docs/trial-tables.md)
            cols = list(self.trials.columns)
            if "status" in cols and "final_value" in cols:
                names = cols[cols.index("status") + 1: cols.index("final_value")]
            else:
                names = []
        return [n for n in names if n in self.trials.columns]

    @property
    def time_attr(self) -> str:
        """ASHA's unit as the space names it: ``epoch``, ``step`` or ``time``."""
        return self.spec.scheduler.time_attr if self.spec is not None else "epoch"

    @property
    def time_key(self) -> str:
        """The history column that holds :attr:`time_attr` (``time_total_s`` for ``time``)."""
        return self.spec.scheduler.result_key if self.spec is not None else "epoch"

    @property
    def time_unit(self) -> str:
        """:attr:`time_attr` as a word for people: ``epoch``, ``step`` or ``second``."""
        return {"time": "second"}.get(self.time_attr, self.time_attr)

    @property
    def max_t(self) -> float | None:
        return self.spec.scheduler.max_t if self.spec is not None else None

    @property
    def scheduler(self) -> str:
        return self.spec.scheduler.type if self.spec is not None else "?"

    @property
    def rungs(self) -> list[float]:
        """ASHA's milestones as the sweep planned them (the manifest), else from the space."""
        plan = self.manifest.get("plan")
        rungs = plan.get("rungs") if isinstance(plan, dict) else None
        if isinstance(rungs, list) and all(isinstance(r, (int, float)) for r in rungs):
            return list(rungs)
        return list(self.spec.scheduler.rungs()) if self.spec is not None else []

    @property
    def planned(self) -> int | None:
        return self.spec.trials.num if self.spec is not None else None

    @property
    def space_name(self) -> str | None:
        """The space's ``name:`` (the sweep's directory name may differ: ``--name``)."""
        if self.spec is not None:
            return self.spec.name
        return None

    @property
    def status(self) -> str:
        status = str(self.manifest.get("status") or "unknown")
        if driver_died(self.manifest):
            return "died (resume it)"
        return status


def load_sweep(sweep_dir: str | os.PathLike | SweepDir) -> SweepData:
    """Read a sweep directory for the report.

    Raises:
        SweepNotFoundError: ``sweep_dir`` holds no sweep (no ``manifest.json``).
    """
    import pandas as pd

    sweep = sweep_dir if isinstance(sweep_dir, SweepDir) else SweepDir.of(sweep_dir)
    if not os.path.lexists(sweep.manifest):
        raise SweepNotFoundError(f"no sweep at {sweep.path}: it has no manifest "
                                 f"({sweep.manifest.name})")
    notes: list[str] = []
    try:
        manifest = read_manifest(sweep)
    except (HpsearchError, OSError) as exc:
        notes.append(f"{sweep.manifest.name} could not be read: {_one_line(exc)}")
        manifest = {}
    spec = None
    try:
        from hpsearch.space import load_space

        spec = load_space(sweep.space)
    except (HpsearchError, OSError) as exc:
        notes.append(f"{sweep.space.name} could not be loaded ({_one_line(exc)}); "
                     "the report shows what the tables hold without it")
    trials = _read_table(sweep, "trials", notes)
    if trials is None or "status" not in trials.columns or "trial_id" not in trials.columns:
        if trials is not None:
            notes.append(f"{sweep.trials.name} has no trial_id/status column; it is ignored")
        trials = pd.DataFrame({c: pd.Series(dtype="object") for c in _EMPTY_TRIAL_COLUMNS})
    history = _read_table(sweep, "history", notes)
    if history is None or "trial_id" not in history.columns:
        history = pd.DataFrame({c: pd.Series(dtype="object")
                                for c in ("trial_id", "step", "epoch", "time_total_s")})
    return SweepData(sweep, manifest, spec, trials, history, notes)


def _read_table(sweep: SweepDir, which: str, notes: list[str]):
    from hpsearch.store.tables import read_history, read_trials

    path = getattr(sweep, which)
    if not os.path.lexists(path):
        return None
    if path.is_dir() and not (which == "history" and SweepDir.is_history_dataset(path)):
        notes.append(f"{path.name} is a directory, not a table; it is ignored")
        return None
    try:
        return (read_trials if which == "trials" else read_history)(path)
    except (HpsearchError, OSError) as exc:
        notes.append(f"{path.name} could not be read: {_one_line(exc)}")
        return None


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
