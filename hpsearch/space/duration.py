"""Durations and deadlines as written in space files and flags: ``90s``, ``30m``, ``8h``,
``1h30m``, ``2d`` or seconds; ``07:00`` or ``2026-12-01T07:00``."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

__all__ = ["format_duration", "parse_deadline", "parse_duration"]

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


_CLOCK = re.compile(r"^([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?$", re.ASCII)
_DEADLINE_FORMS = "07:00 (the next 07:00, local time) or 2026-12-01T07:00 (ISO, optional zone)"


def parse_deadline(value: object, *, now: datetime | None = None) -> datetime:
    """The moment ``value`` names, as an aware datetime in the future.

    Args:
        value: ``"HH:MM"`` (or ``HH:MM:SS``): the next time the local clock shows it (today
            if still ahead, else tomorrow). An ISO date-time, ``"2026-12-01T07:00"``, with
            an optional zone (``Z``, ``+01:00``); without one it is local time.
        now: The present (default: now), for tests.

    Raises:
        ValueError: Not one of those forms, already past, or more than a year ahead.

    Example:
        >>> now = datetime(2026, 11, 30, 23, 0).astimezone()
        >>> parse_deadline("07:00", now=now).strftime("%Y-%m-%d %H:%M")
        '2026-12-01 07:00'
    """
    now = (now or datetime.now()).astimezone()
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and _CLOCK.match(value.strip()):
        h, m, s = (int(g) if g else 0 for g in _CLOCK.match(value.strip()).groups())
        if h > 23 or m > 59 or s > 59:
            raise ValueError(f"not a time of day: expected {_DEADLINE_FORMS} (got {value!r})")
        moment = now.replace(hour=h, minute=m, second=s, microsecond=0)
        if moment <= now:
            moment += timedelta(days=1)
    elif isinstance(value, str) and value.strip().isascii():
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"expected a deadline such as {_DEADLINE_FORMS} (got {value!r})")\
                from None
    else:
        raise ValueError(f"expected a deadline such as {_DEADLINE_FORMS} (got {value!r})")
    if moment.tzinfo is None:
        moment = moment.astimezone()  # naive: local time
    if moment <= now:
        raise ValueError(f"the deadline {moment.isoformat(timespec='minutes')} has already "
                         f"passed (it is {now.isoformat(timespec='minutes')} now)")
    if moment - now > timedelta(days=366) and now.year > 1970:
        raise ValueError(f"the deadline must be within a year (got {value!r})")
    return moment
