"""Live progress of a sweep, drawn from the trial records (not from Ray's tables).

Pure formatting over :class:`TrialRecords`; the Tune callback that prints it is
:class:`hpsearch.callbacks.ProgressCallback`.
"""

from __future__ import annotations

from typing import Any

from hpsearch.space.spec import Spec
from hpsearch.tables import TrialRecords


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summarize(records: TrialRecords, spec: Spec, *, elapsed: float) -> dict[str, Any]:
    """Counts, best trial and ETA; pure over the records."""
    counts: dict[str, int] = {}
    for row in records.trials.values():
        counts[row.get("status", "running")] = counts.get(row.get("status", "running"), 0) + 1
    ended = sum(v for k, v in counts.items() if k not in ("running", "pending"))
    best = best_trial(records, spec)
    eta = None
    if ended:
        eta = elapsed / ended * max(spec.trials.num - ended, 0)
    if spec.budget.time_s:
        eta = min(eta if eta is not None else spec.budget.time_s, spec.budget.time_s - elapsed)
    return {"counts": counts, "ended": ended, "best": best, "eta": eta}


def best_trial(records: TrialRecords, spec: Spec) -> dict[str, Any] | None:
    sign = 1 if spec.objective.mode == "min" else -1
    scored = [r for r in records.trials.values() if r.get("best_value") is not None]
    if not scored:
        return None
    return min(scored, key=lambda r: sign * r["best_value"])


def best_config_text(row: dict[str, Any], spec: Spec) -> str:
    return ", ".join(
        f"{p.name}={fmt_value(row[p.name])}" for p in spec.params if row.get(p.name) is not None
    )


def status_line(records: TrialRecords, spec: Spec, *, elapsed: float) -> str:
    s = summarize(records, spec, elapsed=elapsed)
    c = s["counts"]
    parts = [
        f"{c.get('running', 0)} running",
        f"{s['ended']}/{spec.trials.num} ended",
    ]
    stopped = c.get("stopped_by_asha", 0)
    if stopped:
        parts.append(f"{stopped} stopped by ASHA")
    failed = sum(c.get(k, 0) for k in ("failed", "diverged", "unsupported_precision"))
    if failed:
        parts.append(f"{failed} failed/diverged")
    line = ", ".join(parts)
    if s["best"]:
        line += (
            f" | best {spec.objective.metric} {fmt_value(s['best']['best_value'])}"
            f" ({best_config_text(s['best'], spec)})"
        )
    line += f" | {fmt_duration(elapsed)} elapsed"
    if s["eta"] is not None:
        line += f", ~{fmt_duration(s['eta'])} left"
    return line
