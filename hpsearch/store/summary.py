"""What a sweep's records say, in words: counts, the best trial, the live status line.

Pure formatting over :class:`TrialRecords`; the Tune callback that prints it lives in
:mod:`hpsearch.driver.monitor.progress`.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.records import TrialRecords

__all__ = ["best_config_text", "estimate_remaining", "front_extremes", "fmt_duration", "fmt_value", "printable",
           "rerun_command", "status_line", "summarize"]

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


def estimate_remaining(*, ended: int, planned: int, last_end_at: float | None,
                       elapsed: float, budget_s: float | None = None) -> float | None:
    """Seconds left, from the sweep's trial throughput up to its last trial end.

    The rate is ``ended / last_end_at`` (trials per second of sweep time, ``last_end_at``
    seconds after the sweep started), so the estimate counts down between trial ends and
    never grows while nothing ends. ``None`` until a trial has ended, and once the
    estimate has run out with trials still to go (the next end will give a new one). A
    time budget caps it.
    """
    eta = None
    if ended and last_end_at and last_end_at > 0:
        finish = last_end_at + max(planned - ended, 0) * last_end_at / ended
        eta = finish - elapsed if finish >= elapsed or planned <= ended else None
    if budget_s:
        left = max(budget_s - elapsed, 0.0)
        eta = left if eta is None else min(eta, left)
    return eta


def summarize(records: TrialRecords, spec: Spec, *, elapsed: float,
              started_at: float | None = None) -> dict[str, Any]:
    """Counts, best trial and ETA; pure over the records.

    Args:
        elapsed: Seconds since this run of the sweep started.
        started_at: Epoch time this run started; trials that ended before it (a resume)
            do not count towards the throughput.
    """
    counts = records.counts()
    ended = sum(v for k, v in counts.items() if k in st.ENDED)
    start = started_at if started_at is not None else 0.0
    ends = [r["ended_at"] for r in records.trials.values()
            if r.get("status") in st.ENDED and isinstance(r.get("ended_at"), (int, float))
            and r["ended_at"] >= start]
    last_end_at = (max(ends) - start) if ends and started_at is not None else None
    eta = estimate_remaining(ended=len(ends), planned=spec.trials.num - (ended - len(ends)),
                             last_end_at=last_end_at, elapsed=elapsed,
                             budget_s=spec.budget.time_s)
    return {"counts": counts, "ended": ended, "best": records.best(), "eta": eta}


def best_config_text(row: dict[str, Any], spec: Spec) -> str:
    return ", ".join(
        f"{p.name}={fmt_value(row[p.name])}" for p in spec.params if row.get(p.name) is not None
    )


def front_extremes(front: list[dict[str, Any]], spec: Spec) -> list[tuple[Any, dict[str, Any]]]:
    """``(objective, row)`` for each objective: the front's trial best on it (the ends of
    the front with two objectives)."""
    out = []
    for objective in spec.objectives:
        scored = [r for r in front if objective.score(r.get(objective.metric)) != float("inf")]
        if scored:
            out.append((objective, min(scored, key=lambda r: objective.score(r[objective.metric]))))
    return out


def rerun_command(space_path: str, best: dict[str, Any], spec: Spec) -> str:
    """The ``hpsearch trial`` command line that trains ``best``'s configuration again.

    Floats are written with ``repr`` so the command reproduces the exact value; parameters
    the row lacks (absent, or NaN for a conditional one that was not sampled) are left out.
    """
    sets = []
    for p in spec.params:
        value = best.get(p.name)
        if _missing(value):  # absent, or NaN/NA for an unsampled conditional
            continue
        if hasattr(value, "item"):  # a numpy scalar from a DataFrame row
            value = value.item()
        sets += ["--set", f"{p.name}={value!r}" if isinstance(value, float) else f"{p.name}={value}"]
    return shlex.join(["hpsearch", "trial", space_path, *sets])


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)
    except TypeError:  # pandas' NA: its comparisons are NA, which has no truth value
        return True


def status_line(records: TrialRecords, spec: Spec, *, elapsed: float,
                started_at: float | None = None) -> str:
    s = summarize(records, spec, elapsed=elapsed, started_at=started_at)
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
