"""``hpsearch ls``: one summary per sweep directory under a storage root.

A listing never dies on one odd directory: a sweep whose files cannot be read is listed
with ``damaged: <reason>`` and the others are listed as usual.
"""

from __future__ import annotations

import math
import os
from datetime import datetime
from typing import Any

from hpsearch.errors import DamagedSweepError, HpsearchError
from hpsearch.space.spec import Objective, Trials
from hpsearch.store import status as st
from hpsearch.store.layout import DEFAULT_STORAGE, SweepDir, storage_root
from hpsearch.store.manifest import driver_died, read_manifest
from hpsearch.store.tables import python_value

__all__ = ["LISTING_KEYS", "list_sweeps"]

#: The keys of each summary, in the order ``hpsearch ls --json`` prints them.
LISTING_KEYS = ("name", "status", "trials_ended", "trials_planned", "metric", "mode",
                "best_value", "best_trial", "best_config", "front", "worker_hours",
                "gpu_hours", "started_at", "ended_at", "logs")


def list_sweeps(storage: str | os.PathLike = DEFAULT_STORAGE) -> list[dict[str, Any]]:
    """One summary dict per sweep directory under ``storage``, newest first.

    Keys (:data:`LISTING_KEYS`): ``name``; ``status`` (the manifest's, ``died (resume
    it)`` for a running sweep whose driver is gone, or ``damaged: <reason>``);
    ``trials_ended`` and ``trials_planned``; the objective's ``metric`` and ``mode``;
    ``best_value``, ``best_trial`` and ``best_config`` (the best trial's searched
    parameters; with several objectives, of the first); ``front``, the number of trials
    on the Pareto front with several objectives (``pareto`` true), else ``None``;
    ``worker_hours`` and ``gpu_hours`` (sums of the trial table's
    ``worker_s`` and ``gpu_s``); ``started_at`` and ``ended_at`` (ISO 8601, UTC, from the
    manifest); ``logs``, where a command trainable's trials keep their output
    (``<sweep>/trials/<trial_id>/output.log``). Values that are not known are ``None``.
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
            row = dict.fromkeys(LISTING_KEYS)
            row.update(name=sweep.name, status=f"damaged: {_reason(exc)}")
            rows.append(row)
    return sorted(rows, key=lambda r: r["started_at"] or "", reverse=True)


def _summary(sweep: SweepDir) -> dict[str, Any]:
    try:
        manifest = read_manifest(sweep)
    except OSError as exc:
        raise DamagedSweepError(f"manifest.json unreadable ({exc.strerror or exc})") from None
    except DamagedSweepError as exc:
        raise DamagedSweepError(_short_reason(exc, sweep.manifest)) from None
    space = _space(sweep)
    objective_raw = manifest.get("objective") if isinstance(manifest.get("objective"), dict) else {}
    metric = str(objective_raw.get("metric", "")) or None
    objective = Objective(metric or "", "max" if objective_raw.get("mode") == "max" else "min")
    ended = 0
    best_value = best_trial = best_config = worker_h = gpu_h = front = None
    df = _trials(sweep)
    if df is not None:
        ended = int(df["status"].isin(list(st.ENDED)).sum())
        if "pareto" in df.columns:
            front = int(df["pareto"].fillna(False).astype(bool).sum())
        if "best_value" in df.columns:
            feasible = df["feasible"].fillna(True).astype(bool).tolist() \
                if "feasible" in df.columns else [True] * len(df)
            scores = [objective.score(v) if ok else math.inf
                      for v, ok in zip(df["best_value"], feasible)]
            finite = [i for i, s in enumerate(scores) if math.isfinite(s)]
            if finite:
                i = min(finite, key=lambda k: scores[k])
                row = df.iloc[i]
                best_value = float(row["best_value"])
                best_trial = str(row["trial_id"]) if "trial_id" in df.columns else None
                best_config = {p: python_value(row[p]) for p in _params(space, df)
                               if python_value(row[p]) is not None}
        worker_h = _hours(df, "worker_s")
        gpu_h = _hours(df, "gpu_s")
    status = str(manifest.get("status", "?"))
    if driver_died(manifest):
        status = "died (resume it)"
    elif status == st.SWEEP_DISK_FULL:
        status = "disk full (resume it)"
    return {
        "name": sweep.name,
        "status": status,
        "trials_ended": ended,
        "trials_planned": _planned(space),
        "metric": metric,
        "mode": objective.mode if metric else None,
        "best_value": best_value,
        "best_trial": best_trial,
        "best_config": best_config,
        "front": front,
        "worker_hours": worker_h,
        "gpu_hours": gpu_h,
        "started_at": _text(manifest.get("started_at")),
        "ended_at": _text(manifest.get("ended_at")),
        "logs": _logs(sweep),
    }


def _logs(sweep: SweepDir) -> str | None:
    """Where the trials' own output is (command trainables), or ``None``."""
    folder = sweep.trial_dirs
    return os.path.join(folder, "<trial_id>", "output.log") if folder.is_dir() else None


def _trials(sweep: SweepDir):
    """The trial table, ``None`` when there is none yet; damage raises."""
    if not os.path.lexists(sweep.trials):
        return None
    if sweep.trials.is_dir():
        raise DamagedSweepError("trials.parquet is a directory")
    from hpsearch.store.tables import read_trials

    try:
        df = read_trials(sweep.trials)
    except DamagedSweepError as exc:
        raise DamagedSweepError(_short_reason(exc, sweep.trials)) from None
    except OSError as exc:
        raise DamagedSweepError(f"trials.parquet unreadable ({exc.strerror or exc})") from None
    if "status" not in df.columns:
        raise DamagedSweepError("trials.parquet has no status column")
    return df


def _space(sweep: SweepDir) -> dict[str, Any] | None:
    import yaml

    try:
        raw = yaml.safe_load(sweep.space.read_text())
    except Exception:  # noqa: BLE001 - a listing must not die on one odd file
        return None
    return raw if isinstance(raw, dict) else None


def _planned(space: dict[str, Any] | None) -> int | None:
    if space is None:
        return None
    trials = space.get("trials")
    num = trials.get("num") if isinstance(trials, dict) else None
    return num if isinstance(num, int) else Trials().num


def _params(space: dict[str, Any] | None, df) -> list[str]:
    """Searched parameters: the space's non-fixed ``params``, else the trial table's
    columns between ``status`` and ``final_value`` (docs/trial-tables.md)."""
    params = space.get("params") if space else None
    if isinstance(params, dict):
        names = [k for k, v in params.items() if isinstance(v, dict)]
    else:
        cols = list(df.columns)
        names = (cols[cols.index("status") + 1: cols.index("final_value")]
                 if "final_value" in cols else [])
    return [n for n in names if n in df.columns]


def _hours(df, column: str) -> float | None:
    if column not in df.columns:
        return None
    import pandas as pd

    values = pd.to_numeric(df[column], errors="coerce").dropna()
    return math.fsum(values) / 3600


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _short_reason(exc: Exception, path) -> str:
    """An error about ``path`` without its full path or its advice: a listing line."""
    text = str(exc).replace(str(path), path.name).split(" Nothing was changed")[0]
    return text.rstrip(". ")


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 80 else text[:77] + "..."


def find_previous(sweep_dir: str | os.PathLike | SweepDir) -> SweepDir | None:
    """The newest sweep in the same storage that started before this one and whose space
    has the same ``name:``; ``None`` when there is none. Unreadable sweeps are skipped."""
    sweep = sweep_dir if isinstance(sweep_dir, SweepDir) else SweepDir.of(sweep_dir)
    name = _space_name(sweep)
    started = _started(sweep)
    if name is None or started is None:
        return None
    best: tuple[datetime, SweepDir] | None = None
    try:
        children = [p for p in sweep.storage.iterdir() if p.is_dir() and p != sweep.path]
    except OSError:
        return None
    for child in children:
        other = SweepDir(child)
        if not other.manifest.is_file() or _space_name(other) != name:
            continue
        when = _started(other)
        if when is None or when >= started:
            continue
        if best is None or when > best[0]:
            best = (when, other)
    return best[1] if best else None


def _space_name(sweep: SweepDir) -> str | None:
    import yaml

    try:
        raw = yaml.safe_load(sweep.space.read_text())
        name = raw.get("name") if isinstance(raw, dict) else None
        return str(name) if name is not None else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _started(sweep: SweepDir) -> datetime | None:
    from hpsearch.store.manifest import read_manifest

    try:
        value = read_manifest(sweep).get("started_at")
        when = datetime.fromisoformat(str(value))
    except (HpsearchError, OSError, ValueError, TypeError):
        return None
    if when.tzinfo is None:
        from datetime import timezone

        when = when.replace(tzinfo=timezone.utc)
    return when
