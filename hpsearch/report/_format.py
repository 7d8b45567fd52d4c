"""Cells of the report as text: numbers, hours, times, configurations, error lines."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from hpsearch.report._load import python_value
from hpsearch.store.summary import fmt_value

__all__ = ["config_text", "fmt_hours"]


def fmt_hours(seconds: float | None) -> str:
    """Hours with enough digits for a small sweep: ``0.0123``, ``1.25``, ``312.4``."""
    if seconds is None:
        return "n/a"
    hours = seconds / 3600
    if hours == 0:
        return "0"
    if hours < 1:  # four significant digits, never in scientific notation: 0.00004444
        import numpy as np

        return np.format_float_positional(hours, precision=4, unique=False, fractional=False,
                                          trim="-")
    return f"{hours:.2f}" if hours < 100 else f"{hours:.1f}"


def config_text(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in config.items()) or "(no searched parameters)"


def _fmt(value: Any, missing: str = "n/a") -> str:
    """A cell: four significant digits, but large numbers in full (``29560``, not
    ``2.956e+04``)."""
    value = python_value(value)
    if value is None:
        return missing
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, float) and 1e4 <= abs(value) < 1e12:
        return f"{value:.0f}"
    return fmt_value(value)


def _when(value: Any, *, short: bool = False) -> str:
    """A manifest or table time as ``YYYY-MM-DD HH:MM:SS UTC`` (``short``: ``MM-DD
    HH:MM:SS``, for a table whose header names the zone)."""
    value = python_value(value)
    if value is None:
        return "n/a"
    try:
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if getattr(value, "tzinfo", None) is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).strftime(
            "%m-%d %H:%M:%S" if short else "%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, AttributeError):
        return str(value)


def _seconds_between(start: Any, end: Any) -> float | None:
    try:
        a = datetime.fromisoformat(str(start))
        b = datetime.fromisoformat(str(end))
        return (b - a).total_seconds()
    except (TypeError, ValueError):
        return None


def _clip(text: str, limit: int = 300) -> str:
    """One line of at most ``limit`` characters, control characters shown escaped (a
    carriage return in an error must not hide what came before it)."""
    from hpsearch.store.summary import printable

    text = " ".join(printable(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

