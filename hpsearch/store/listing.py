"""``hpsearch ls``: one summary per sweep directory under a storage root.

A listing never dies on one odd directory: a sweep whose files cannot be read is listed
with ``damaged: <reason>`` and the others are listed as usual.
"""

from __future__ import annotations

import os
from typing import Any

from hpsearch.errors import DamagedSweepError
from hpsearch.space.spec import Objective, Trials
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir, storage_root
from hpsearch.store.manifest import driver_died, read_manifest

__all__ = ["list_sweeps"]


def list_sweeps(storage: str | os.PathLike = "./runs") -> list[dict[str, Any]]:
    """One summary dict per sweep directory under ``storage`` (newest first).

    Keys: ``name``, ``status``, ``trials`` (ended/planned), ``best``, ``started_at``.
    """
    root = storage_root(storage)
    rows = []
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return []
    for child in children:
        sweep = SweepDir(child)
        if not os.path.lexists(sweep.manifest):
            continue
        try:
            rows.append(_summary(sweep))
        except DamagedSweepError as exc:
            rows.append({"name": sweep.name, "status": f"damaged: {_reason(exc)}",
                         "trials": "?", "best": "-", "started_at": None})
    return sorted(rows, key=lambda r: r["started_at"] or "", reverse=True)


def _summary(sweep: SweepDir) -> dict[str, Any]:
    try:
        manifest = read_manifest(sweep)
    except OSError as exc:
        raise DamagedSweepError(f"manifest.json unreadable ({exc.strerror or exc})") from None
    planned = _planned_trials(sweep)
    ended, best = 0, None
    objective_raw = manifest.get("objective") if isinstance(manifest.get("objective"), dict) else {}
    metric = str(objective_raw.get("metric", ""))
    objective = Objective(metric, "max" if objective_raw.get("mode") == "max" else "min")
    if os.path.lexists(sweep.trials):
        from hpsearch.store.tables import read_trials

        try:
            df = read_trials(sweep.trials)
        except OSError as exc:
            raise DamagedSweepError(f"trials.parquet unreadable ({exc.strerror or exc})") \
                from None
        if "status" not in df.columns:
            raise DamagedSweepError("trials.parquet has no status column")
        ended = int(df["status"].isin(list(st.ENDED)).sum())
        if "best_value" in df.columns:
            best = objective.best(df["best_value"].tolist())
    status = str(manifest.get("status", "?"))
    if driver_died(manifest):
        status = "died (resume it)"
    started = manifest.get("started_at")
    return {
        "name": sweep.name,
        "status": status,
        "trials": f"{ended}/{planned}",
        "best": f"{metric} {best:.4g}" if best is not None else "-",
        "started_at": started if isinstance(started, str) else None,
    }


def _planned_trials(sweep: SweepDir) -> Any:
    import yaml

    try:
        raw = yaml.safe_load(sweep.space.read_text())
        return (raw.get("trials") or {}).get("num") or Trials().num
    except Exception:  # noqa: BLE001 - a listing must not die on one odd file
        return "?"


def _reason(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 80 else text[:77] + "..."
