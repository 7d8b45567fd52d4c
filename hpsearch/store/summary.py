"""What a sweep's records say, in words: counts, the best trial, the live status line.

Pure formatting over :class:`TrialRecords`; the Tune callback that prints it lives in
:mod:`hpsearch.driver.callbacks`.
"""

from __future__ import annotations

import re
from typing import Any

from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.records import TrialRecords

__all__ = ["best_config_text", "fmt_duration", "fmt_value", "printable", "status_line",
           "summarize"]

# C0 and C1 control characters (escape sequences, carriage returns...), DEL included.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: Any) -> str:
    """``text`` safe to print on one terminal line: control characters (an ANSI escape
    from a parameter value, a carriage return from an error) are shown escaped."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(max(seconds, 0)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return printable(value)


def summarize(records: TrialRecords, spec: Spec, *, elapsed: float) -> dict[str, Any]:
    """Counts, best trial and ETA; pure over the records."""
    counts = records.counts()
    ended = sum(v for k, v in counts.items() if k in st.ENDED)
    eta = None
    if ended:
        eta = elapsed / ended * max(spec.trials.num - ended, 0)
    if spec.budget.time_s:
        eta = min(eta if eta is not None else spec.budget.time_s, spec.budget.time_s - elapsed)
    return {"counts": counts, "ended": ended, "best": records.best(), "eta": eta}


def best_config_text(row: dict[str, Any], spec: Spec) -> str:
    return ", ".join(
        f"{p.name}={fmt_value(row[p.name])}" for p in spec.params if row.get(p.name) is not None
    )


def status_line(records: TrialRecords, spec: Spec, *, elapsed: float) -> str:
    s = summarize(records, spec, elapsed=elapsed)
    c = s["counts"]
    parts = [
        f"{c.get(st.RUNNING, 0)} running",
        f"{s['ended']}/{spec.trials.num} ended",
    ]
    stopped = c.get(st.STOPPED_BY_ASHA, 0)
    if stopped:
        parts.append(f"{stopped} stopped by ASHA")
    failed = sum(c.get(k, 0) for k in (st.FAILED, st.DIVERGED, st.UNSUPPORTED_PRECISION))
    if failed:
        parts.append(f"{failed} failed/diverged")
    line = ", ".join(parts)
    if s["best"]:
        line += (
            f" | best {printable(spec.objective.metric)} {fmt_value(s['best']['best_value'])}"
            f" ({best_config_text(s['best'], spec)})"
        )
    line += f" | {fmt_duration(elapsed)} elapsed"
    if s["eta"] is not None:
        line += f", ~{fmt_duration(s['eta'])} left"
    return line
