"""Durations as written in space files: ``90s``, ``30m``, ``8h``, ``1h30m``, ``2d`` or seconds."""

from __future__ import annotations

import math
import re

__all__ = ["parse_duration", "format_duration"]

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # ASCII digits only: "١٢h" is not 12 h
_DURATION = re.compile(
    rf"^(?:(?P<d>{_NUMBER})\s*d)?\s*(?:(?P<h>{_NUMBER})\s*h)?\s*"
    rf"(?:(?P<m>{_NUMBER})\s*m)?\s*(?:(?P<s>{_NUMBER})\s*s)?$",
    re.ASCII,
)
_FORMS = "90s, 30m, 8h, 1h30m, 2d or a number of seconds"


def parse_duration(value: object) -> float:
    """Return the number of seconds ``value`` stands for.

    Args:
        value: A positive number of seconds, or a string of ``<number><unit>`` parts in the
            order d, h, m, s, e.g. ``"90s"``, ``"30m"``, ``"8h"``, ``"1h30m"``, ``"2d"``,
            ``"1.5h"``, ``"3600"``.

    Returns:
        The duration in seconds, as a float.

    Raises:
        ValueError: ``value`` is not a duration or is not positive. The message lists the
            accepted forms and repeats the value.

    Example:
        >>> parse_duration("1h30m")
        5400.0
        >>> parse_duration(90)
        90.0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected a duration such as {_FORMS} (got {value!r})")
    if isinstance(value, str):
        text = value.strip().lower()
        if re.fullmatch(_NUMBER, text, re.ASCII):
            seconds = float(text)
        else:
            match = _DURATION.match(text)
            if not text or match is None or not any(match.groupdict().values()):
                raise ValueError(f"expected a duration such as {_FORMS} (got {value!r})")
            seconds = sum(float(n) * _UNITS[u] for u, n in match.groupdict().items() if n)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be a positive, finite time (got {value!r})")
    return seconds


def format_duration(seconds: float) -> str:
    """``5400`` -> ``"1h30m"``; the inverse of :func:`parse_duration` for display."""
    if seconds < 60 or seconds != int(seconds):
        return f"{seconds:g}s"
    out, rest = "", int(seconds)
    for unit in "dhms":
        n, rest = divmod(rest, int(_UNITS[unit]))
        if n:
            out += f"{n}{unit}"
    return out
