"""The facts a report states, computed from the trial tables: pure pandas, no plotting.

Each function takes a :class:`SweepData` and returns plain data (dicts, lists, small
DataFrames), so the figures and both renderings (HTML, Markdown) state the same numbers
and tests can check them directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hpsearch.report._load import SweepData, python_value
from hpsearch.store import status as st

__all__ = ["Ledger", "MIN_IMPORTANCE_TRIALS", "best_row", "config_of", "equal_budget",
           "failures", "funnel", "ledger", "milestones", "precision_table", "progress",
           "ranked", "reached", "recovered_reports", "status_counts", "unit_name"]

#: Fewest trials compared at one budget for parameter importance to be worth computing.
MIN_IMPORTANCE_TRIALS = 5


def unit_name(data: SweepData) -> str:
    """The unit of ASHA's rungs as a plural word: ``epochs``, ``steps``."""
    return data.time_unit + "s"


def status_counts(trials) -> dict[str, int]:
    """Trials per status, in the order the docs list the statuses (others after)."""
    counts = trials["status"].fillna(st.RUNNING).astype(str).value_counts().to_dict()
    order = [s for s in st.STATUSES if s in counts] + sorted(set(counts) - set(st.STATUSES))
    return {s: int(counts[s]) for s in order}


def ranked(data: SweepData):
    """Trials with a finite ``best_value``, best first (ties keep table order); with
    constraints, only the feasible ones: an infeasible trial is never the best."""
    import numpy as np

    trials = data.trials
    if "feasible" in trials:
        trials = trials[trials["feasible"].fillna(True).astype(bool)]
    values = trials["best_value"].astype("float64")
    scored = trials[np.isfinite(values)].copy()
    scored["_score"] = scored["best_value"].astype("float64") * data.objective.sign
    return scored.sort_values("_score", kind="stable").drop(columns="_score")


def best_row(data: SweepData) -> dict[str, Any] | None:
    """The best trial's row as plain values, or ``None`` when no trial has a value."""
    top = ranked(data)
    if top.empty:
        return None
    return {k: python_value(v) for k, v in top.iloc[0].to_dict().items()}


def config_of(row: dict[str, Any], params: list[str]) -> dict[str, Any]:
    """The searched parameters a row ran with (a conditional one that did not apply is left
    out)."""
    out = {}
    for name in params:
        value = python_value(row.get(name))
        if value is not None:
            out[name] = value
    return out


def reached(data: SweepData):
    """How far each trial got in ASHA's unit (``time_attr``), indexed by ``trial_id``."""
    import pandas as pd

    trials = data.trials
    column = {"epoch": "epochs", "step": "steps", "time": "wall_s"}.get(data.time_attr)
    if column in trials.columns:
        values = pd.to_numeric(trials[column], errors="coerce").astype("float64")
        return pd.Series(values.to_numpy(), index=trials["trial_id"].astype(str))
    history = data.evals
    out = pd.Series(math.nan, index=trials["trial_id"].astype(str), dtype="float64")
    if data.time_key in history.columns and not history.empty:
        got = pd.to_numeric(history[data.time_key], errors="coerce").groupby(
            history["trial_id"].astype(str)).max()
        out.update(got)
    return out


def milestones(data: SweepData) -> list[float]:
    """ASHA's rungs followed by ``max_t`` (just ``max_t`` without ASHA)."""
    out = sorted(set(data.rungs))
    if data.max_t is not None and data.max_t not in out:
        out.append(data.max_t)
    return out


def funnel(data: SweepData) -> list[dict[str, Any]]:
    """At each milestone: how many trials reached it, and what became of them there.

    Rows (one per milestone, after a ``before`` row for trials that ended short of the
    first one): ``milestone``, ``reached``, ``stopped_by_asha`` (ended here, stopped by
    ASHA), ``ended_otherwise`` (``{status: n}`` of the others that ended here),
    ``running`` (here now), ``went_on`` (reached the next milestone).
    """
    marks = milestones(data)
    if not marks:
        return []
    got = reached(data)
    status = data.trials.set_index(data.trials["trial_id"].astype(str))["status"].astype(str)
    rows = []
    short = got.isna() | (got < marks[0])
    rows.append(_funnel_row("before", short, short, status))
    for i, mark in enumerate(marks):
        nxt = marks[i + 1] if i + 1 < len(marks) else math.inf
        here = got >= mark
        stays = here & (got < nxt)
        rows.append(_funnel_row(mark, here, stays, status))
    return rows


def _funnel_row(mark, here, stays, status) -> dict[str, Any]:
    ended = stays & status.isin(list(st.ENDED))
    others = status[ended & (status != st.STOPPED_BY_ASHA)].value_counts().to_dict()
    return {
        "milestone": mark,
        "reached": int(here.sum()),
        "stopped_by_asha": int((ended & (status == st.STOPPED_BY_ASHA)).sum()),
        "ended_otherwise": {str(k): int(v) for k, v in sorted(others.items())},
        "running": int((stays & ~status.isin(list(st.ENDED))).sum()),
        "went_on": int((here & ~stays).sum()),
    }


@dataclass
class Ledger:
    """Compute spent and saved, in seconds. Every figure comes from the trial table's
    ``worker_s`` and ``gpu_s`` columns, so ``worker_s`` here equals their sum.

    Attributes:
        by_status: ``{status: {"trials", "worker_s", "gpu_s"}}``; the parts add up to the
            totals.
        worker_s, gpu_s: Totals (a trial that never reported counts 0).
        asha_worker_s, asha_gpu_s: The part spent on trials ASHA stopped.
        saved_worker_s, saved_gpu_s: Estimated compute ASHA saved against running every
            trial it stopped on to ``max_t`` (``None`` without ASHA or ``max_t``).
        saved_detail: Per stopped trial: ``trial_id``, ``reached``, ``rate_s`` (wall
            seconds per unit), ``how`` the rate was measured, ``saved_worker_s``.
        method: The estimate's method, in words.
    """

    by_status: dict[str, dict[str, float]]
    worker_s: float
    gpu_s: float
    asha_worker_s: float
    asha_gpu_s: float
    saved_worker_s: float | None
    saved_gpu_s: float | None
    saved_detail: list[dict[str, Any]] = field(default_factory=list)
    method: str = ""
    unreported: int = 0


def _fsum(series) -> float:
    import pandas as pd

    values = pd.to_numeric(series, errors="coerce").astype("float64")
    return math.fsum(v for v in values if not math.isnan(v))


def ledger(data: SweepData) -> Ledger:
    """Worker- and GPU-seconds spent (per status, on ASHA-stopped trials) and saved."""
    trials = data.trials
    status = trials["status"].fillna(st.RUNNING).astype(str)
    by_status = {}
    for name in status_counts(trials):
        group = trials[status == name]
        by_status[name] = {"trials": len(group), "worker_s": _fsum(group["worker_s"]),
                           "gpu_s": _fsum(group["gpu_s"])}
    asha = by_status.get(st.STOPPED_BY_ASHA, {"worker_s": 0.0, "gpu_s": 0.0})
    saved_w = saved_g = None
    detail: list[dict[str, Any]] = []
    if data.max_t is not None and data.scheduler == "asha":
        detail = _savings(data)
        saved_w = math.fsum(d["saved_worker_s"] for d in detail)
        saved_g = math.fsum(d["saved_gpu_s"] for d in detail)
    unit = data.time_unit
    method = (
        f"For each trial ASHA stopped: its wall seconds per {unit}, times the {unit}s it "
        f"did not train (max_t {data.max_t} minus the {unit}s it reached), times its "
        "workers (its GPUs for GPU-hours). The seconds per "
        f"{unit} are measured between the trial's own first and last reports, which "
        "leaves start-up out; for a trial with a single report, the median of that rate "
        "over the other trials of the same precision (else of all trials); failing "
        f"that, its wall seconds divided by its {unit}s, start-up included."
    )
    return Ledger(
        by_status=by_status,
        worker_s=_fsum(trials["worker_s"]), gpu_s=_fsum(trials["gpu_s"]),
        asha_worker_s=asha["worker_s"], asha_gpu_s=asha["gpu_s"],
        saved_worker_s=saved_w, saved_gpu_s=saved_g, saved_detail=detail, method=method,
        unreported=int(trials["worker_s"].isna().sum()),
    )


def _marginal_rates(data: SweepData) -> dict[str, float]:
    """Wall seconds per unit of ``time_attr`` between each trial's first and last report."""
    import pandas as pd

    history = data.evals
    if data.time_key not in history.columns or "time_total_s" not in history.columns:
        return {}
    frame = pd.DataFrame({
        "trial_id": history["trial_id"].astype(str),
        "t": pd.to_numeric(history[data.time_key], errors="coerce"),
        "s": pd.to_numeric(history["time_total_s"], errors="coerce"),
    }).dropna()
    rates = {}
    for tid, rows in frame.groupby("trial_id"):
        rows = rows.sort_values("t")
        dt = rows["t"].iloc[-1] - rows["t"].iloc[0]
        ds = rows["s"].iloc[-1] - rows["s"].iloc[0]
        if dt > 0 and ds > 0:
            rates[str(tid)] = float(ds / dt)
    return rates


def _savings(data: SweepData) -> list[dict[str, Any]]:
    import statistics

    trials = data.trials
    got = reached(data)
    rates = _marginal_rates(data)
    precision = _precision_of(data)
    out = []
    for row in trials[trials["status"] == st.STOPPED_BY_ASHA].to_dict("records"):
        tid = str(row["trial_id"])
        wall = python_value(row.get("wall_s"))
        worker_s = python_value(row.get("worker_s")) or 0.0
        gpu_s = python_value(row.get("gpu_s")) or 0.0
        done = python_value(got.get(tid))
        if not wall or not done or done <= 0:
            continue
        left = max(float(data.max_t) - done, 0.0)
        if tid in rates:
            rate, how = rates[tid], "own reports"
        else:
            same = [r for t, r in rates.items() if precision.get(t) == precision.get(tid)]
            if same:
                rate, how = statistics.median(same), "same-precision median"
            elif rates:
                rate, how = statistics.median(rates.values()), "median of all trials"
            else:
                rate, how = wall / done, "own average, start-up included"
        saved_wall = rate * left
        out.append({"trial_id": tid, "reached": done, "rate_s": rate, "how": how,
                    "saved_worker_s": saved_wall * worker_s / wall,
                    "saved_gpu_s": saved_wall * gpu_s / wall})
    return out


def _precision_of(data: SweepData) -> dict[str, Any]:
    column = precision_column(data)
    if column is None:
        return {}
    return {str(t): python_value(p) for t, p in zip(data.trials["trial_id"], data.trials[column])}


def precision_column(data: SweepData) -> str | None:
    """The searched ``precision`` parameter, else the reported ``precision_used``."""
    for column in ("precision", "precision_used"):
        if column in data.trials.columns and data.trials[column].notna().any():
            if column == "precision" and "precision" not in data.params:
                continue
            return column
    return None


def precision_table(data: SweepData, budget: tuple[float, Any] | None = None) -> list[dict]:
    """Per precision: trials, how many produced a value, best and median objective,
    median samples/s, peak memory (``None`` when not measured, e.g. on CPUs), median
    worker seconds per unit of ``time_attr`` and, given an :func:`equal_budget` result,
    the median objective at that budget."""
    import pandas as pd

    column = precision_column(data)
    if column is None:
        return []
    trials, history = data.trials, data.history  # training speed: the log_every rows too
    objective = data.objective
    got = reached(data)
    rows = []
    for value, group in trials.groupby(trials[column].astype(str), sort=True):
        ids = set(group["trial_id"].astype(str))
        finite = [v for v in group["best_value"].astype("float64") if math.isfinite(v)]
        hist = history[history["trial_id"].astype(str).isin(ids)]
        speed = None
        if "samples_per_s" in hist.columns:
            s = pd.to_numeric(hist["samples_per_s"], errors="coerce")
            s = s[s > 0]
            speed = float(s.median()) if len(s) else None
        mem = None
        if "peak_mem_mb" in hist.columns:
            m = pd.to_numeric(hist["peak_mem_mb"], errors="coerce").dropna()
            mem = float(m.max()) if len(m) else None
        per_unit = []
        for r in group.to_dict("records"):
            w, done = python_value(r.get("worker_s")), python_value(got.get(str(r["trial_id"])))
            if w and done:
                per_unit.append(w / done)
        row = {
            "precision": value, "trials": len(group), "with_value": len(finite),
            "best": objective.best(finite), "median": _median(finite),
            "samples_per_s": speed, "peak_mem_mb": mem, "worker_s_per_unit": _median(per_unit),
        }
        if budget is not None and budget[1] is not None:
            at = budget[1][budget[1]["trial_id"].isin(ids)]["value"].tolist()
            row["median_at_budget"] = _median(at)
        rows.append(row)
    return rows


def _median(values) -> float | None:
    import statistics

    values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return statistics.median(values) if values else None


def equal_budget(data: SweepData, *, min_trials: int = MIN_IMPORTANCE_TRIALS):
    """Each trial's objective at one budget, so trials are compared fairly.

    The budget is the highest milestone (a rung or ``max_t``) at least ``min_trials``
    trials reached with a finite value there; a trial's value at it is the objective of its
    first report at or past the milestone, the report ASHA judged it by. Without the
    ``time_attr`` column in the history, full-length (``completed``) trials and their
    ``final_value`` are used instead.

    Returns:
        ``(milestone, frame)`` with ``frame`` holding ``trial_id``, the parameters and
        ``value``; ``milestone`` is ``"max_t"`` for the fallback. ``(None, None)`` when
        fewer than ``min_trials`` trials qualify.
    """
    import numpy as np
    import pandas as pd

    trials, history = data.trials, data.evals
    metric = data.objective.metric
    params = data.params
    base = trials[["trial_id", *params]].assign(trial_id=trials["trial_id"].astype(str))
    if data.time_key in history.columns and metric in history.columns and not history.empty:
        h = pd.DataFrame({
            "trial_id": history["trial_id"].astype(str),
            "t": pd.to_numeric(history[data.time_key], errors="coerce"),
            "value": pd.to_numeric(history[metric], errors="coerce").astype("float64"),
            "order": np.arange(len(history)),
        }).dropna(subset=["t"])
        for mark in reversed(milestones(data)):
            first = h[h["t"] >= mark].sort_values(["t", "order"]).groupby("trial_id").head(1)
            first = first[np.isfinite(first["value"])]
            if len(first) >= min_trials:
                frame = base.merge(first[["trial_id", "value"]], on="trial_id")
                return mark, frame.reset_index(drop=True)
        return None, None
    done = trials[(trials["status"] == st.COMPLETED)
                  & np.isfinite(trials["final_value"].astype("float64"))]
    if len(done) >= min_trials:
        frame = base.merge(done[["trial_id"]].astype(str).assign(
            value=done["final_value"].astype("float64").to_numpy()), on="trial_id")
        return "max_t", frame.reset_index(drop=True)
    return None, None


def recovered_reports(data: SweepData) -> int:
    """Reports the resume recovered from the study (``from_study``): they have no time."""
    history = data.evals
    if "from_study" not in history.columns:
        return 0
    return int(history["from_study"].fillna(False).astype(bool).sum())


def progress(data: SweepData):
    """The best objective so far at each finite report, against the sweep's wall hours
    and the worker-hours spent by then.

    Returns a frame with ``wall_h``, ``worker_h``, ``value`` (this report) and ``best``
    (the best so far), in time order; empty when the tables do not allow it.
    """
    import numpy as np
    import pandas as pd

    trials, history = data.trials, data.evals
    metric = data.objective.metric
    empty = pd.DataFrame(columns=["wall_h", "worker_h", "value", "best"])
    if history.empty or metric not in history.columns or "time_total_s" not in history.columns:
        return empty
    started = pd.to_datetime(trials["started_at"], utc=True, errors="coerce")
    start_s = pd.Series([t.timestamp() if not pd.isna(t) else math.nan for t in started],
                        index=trials["trial_id"].astype(str), dtype="float64")
    wall = pd.to_numeric(trials["wall_s"], errors="coerce").astype("float64").to_numpy()
    workers = np.where(wall > 0, pd.to_numeric(trials["worker_s"], errors="coerce")
                       .astype("float64").to_numpy() / np.where(wall > 0, wall, 1.0), 0.0)
    ok = np.isfinite(start_s.to_numpy()) & np.isfinite(wall) & np.isfinite(workers)
    t_start, t_wall, t_workers = start_s.to_numpy()[ok], wall[ok], workers[ok]
    if not ok.any():
        return empty
    t0 = float(np.nanmin(t_start))
    events = pd.DataFrame({
        "at": history["trial_id"].astype(str).map(start_s).to_numpy()
        + pd.to_numeric(history["time_total_s"], errors="coerce").to_numpy(dtype="float64"),
        "value": pd.to_numeric(history[metric], errors="coerce").to_numpy(dtype="float64"),
    })
    events = events[np.isfinite(events["at"]) & np.isfinite(events["value"])]
    if events.empty:
        return empty
    events = events.sort_values("at", kind="stable")
    at = events["at"].to_numpy()
    held = np.clip(at[:, None] - t_start[None, :], 0.0, t_wall[None, :])
    worker_s = (held * t_workers[None, :]).sum(axis=1)
    sign = data.objective.sign
    best = np.minimum.accumulate(events["value"].to_numpy() * sign) * sign
    return pd.DataFrame({"wall_h": (at - t0) / 3600.0, "worker_h": worker_s / 3600.0,
                         "value": events["value"].to_numpy(), "best": best})


def failures(data: SweepData) -> list[dict[str, Any]]:
    """Trials that produced no usable model (failed, diverged, unsupported precision), or
    carry an error: ``trial_id``, ``status``, ``reached``, ``config``, ``error`` (the
    table's error line, else the harness's ``reason``)."""
    trials, history = data.trials, data.evals
    bad = {st.FAILED, st.DIVERGED, st.UNSUPPORTED_PRECISION}
    reasons: dict[str, str] = {}
    if "reason" in history.columns:
        for tid, reason in zip(history["trial_id"].astype(str), history["reason"]):
            reason = python_value(reason)
            if reason:
                reasons[tid] = str(reason)
    got = reached(data)
    out = []
    for row in trials.to_dict("records"):
        error = python_value(row.get("error"))
        if row.get("status") not in bad and not error:
            continue
        tid = str(row["trial_id"])
        out.append({"trial_id": tid, "status": str(row.get("status")),
                    "reached": python_value(got.get(tid)),
                    "config": config_of(row, data.params),
                    "error": str(error or reasons.get(tid) or "")})
    return out
