"""A script's output lines -> reports.

Every line of a command's output (stdout and stderr together) is looked at once:

* with ``metrics`` patterns, each pattern that matches the line gives its named groups
  as numbers (``step (?P<step>\\d+): val loss (?P<val_loss>[0-9.]+)``);
* without them, a line that is a JSON object, or that holds ``key=value`` pairs with
  numeric values (Katib's convention: ``epoch=3 val_loss=0.41``), gives those.

Only a line that carries the objective metric is a report. Metrics of lines without it
(a training loss printed every few steps) ride along with the next report. A report
without the time attribute (``step``, ``epoch``) takes the last one seen, and the
number of reports so far when the script never prints one.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

__all__ = ["OutputReader", "compile_patterns", "parse_line"]

_INT = re.compile(r"[-+]?\d+")
_PAIR = re.compile(
    r"(?<![\w./-])([A-Za-z_][\w./-]*)\s*=\s*"
    r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)(?![\w.]))"
    r"(?=$|[\s,;)\]|])",
    re.IGNORECASE,
)


def compile_patterns(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    """The ``metrics`` patterns, compiled (validation has checked they compile)."""
    return [re.compile(p) for p in patterns]


def number(text: str) -> int | float | None:
    """``text`` as an int (digits only) or a float, else ``None``."""
    text = text.strip()
    if _INT.fullmatch(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return None


def parse_line(line: str, patterns: Sequence[re.Pattern[str]] = ()) -> dict[str, Any]:
    """The metrics one output line holds (``{}`` for most lines).

    Example:
        >>> parse_line("epoch=2 val_loss=0.5 note=warm")
        {'epoch': 2, 'val_loss': 0.5}
        >>> parse_line("step 40: val loss 1.25", [re.compile(r"step (?P<step>\\d+): val loss (?P<val_loss>\\S+)")])
        {'step': 40, 'val_loss': 1.25}
    """
    line = line.rstrip("\r\n").rsplit("\r", 1)[-1]  # a progress bar's last state
    out: dict[str, Any] = {}
    if patterns:
        for pattern in patterns:
            match = pattern.search(line)
            if match is None:
                continue
            for name, text in match.groupdict().items():
                value = number(text) if text is not None else None
                if value is not None:
                    out[name] = value
        return out
    text = line.strip()
    if text.startswith("{") and text.endswith("}"):
        try:
            found = json.loads(text)
        except ValueError:
            found = None
        if isinstance(found, dict):
            return {str(k): v for k, v in found.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for key, value in _PAIR.findall(line):
        parsed = number(value)
        if parsed is not None:
            out[key] = parsed
    return out


class OutputReader:
    """Reads one trial's output, line by line, into reports (see the module docstring).

    Args:
        patterns: The ``metrics`` patterns (empty: ``key=value`` and JSON lines).
        objective: The objective metric: a line that has it is a report.
        time_key: The scheduler's time attribute (``step`` or ``epoch``); ``None`` for
            ``time``, which Tune measures itself.
    """

    def __init__(self, patterns: Sequence[str], *, objective: str, time_key: str | None):
        self._patterns = compile_patterns(patterns)
        self._objective = objective
        self._time_key = time_key
        self._pending: dict[str, Any] = {}
        self._time: Any = None
        self.reports = 0
        self.seen: set[str] = set()  # every metric name read, for "never reported" errors

    def feed(self, line: str) -> dict[str, Any] | None:
        """The report this line completes, or ``None``."""
        found = parse_line(line, self._patterns)
        if not found:
            return None
        self.seen.update(found)
        if self._time_key and self._time_key in found:
            self._time = found[self._time_key]
        self._pending.update(found)
        if self._objective not in found:
            return None
        report, self._pending = self._pending, {}
        self.reports += 1
        if self._time_key and self._time_key not in report:
            report[self._time_key] = self._time if self._time is not None else self.reports
        return report
