"""A script's output lines -> reports.

Every line of a command's output (stdout and stderr together) is looked at once, in the
state a terminal would show: a progress bar's ``\\r`` redraws leave their last non-blank
state, and ANSI escapes (the ``\\x1b[A`` of a nested bar) are dropped.

* with ``metrics`` patterns, each pattern that matches the line gives its named groups
  as numbers (``step (?P<step>\\d+): val loss (?P<val_loss>[0-9.]+)``);
* without them, a line that is a JSON object or a Python dict (the Hugging Face Trainer's
  logs: floats in 4.x, numbers as strings in 5.x), or that holds ``key=value`` pairs with
  numeric values (Katib's convention: ``epoch=3 val_loss=0.41``; a tqdm bar's postfix, as
  Lightning draws it), gives those.

Only a line that carries the objective metric is a report. Metrics of lines without it
(a training loss printed every few steps) ride along with the next report. A report
without the time attribute takes, in this order: for ``step`` and a Python-dict line, the
step of the training progress bar the dict was written through (the HF Trainer prints no
step in its dicts, but redraws its bar ``50/200 [...]`` right after each one: the first
state of the next line; a nested bar, such as the evaluation's ``44/49``, ends with a
cursor-up and is never taken); the last time attribute seen; the number of reports so far.
A report equal to the one before on its time and objective is a redraw, not a report.
"""

from __future__ import annotations

import ast
import json
import re
import time
from typing import Any, Sequence

__all__ = ["OutputReader", "compile_patterns", "parse_line"]

_INT = re.compile(r"[-+]?\d+")
_PAIR = re.compile(
    r"(?<![\w./-])([A-Za-z_][\w./-]*)\s*=\s*"
    r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)(?![\w.]))"
    r"(?=$|[\s,;)\]|])",
    re.IGNORECASE,
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CURSOR_UP = "\x1b[A"
_BAR = re.compile(r"\|\s*(\d+)/(\d+) \[")  # tqdm's `...| 50/200 [00:24<00:06, ...`
_DICT_MAX = 100_000  # longer "dict" lines are not parsed as Python literals
#: Seconds a Python-dict report waits for its training bar's redraw (the next line).
BAR_WAIT_S = 2.0


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


def numeric(value: Any) -> int | float | None:
    """A metric's value: a number, or a string that is one (HF 5.x prints ``'0.5'``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return number(value)
    return None


def shown(line: str) -> str:
    """What a terminal would show of ``line``: the last non-blank ``\r`` state, no ANSI."""
    for segment in reversed(line.rstrip("\r\n").split("\r")):
        text = _ANSI.sub("", segment)
        if text.strip():
            return text
    return ""


def parse_line(line: str, patterns: Sequence[re.Pattern[str]] = ()) -> dict[str, Any]:
    """The metrics one output line holds (``{}`` for most lines).

    Example:
        >>> parse_line("epoch=2 val_loss=0.5 note=warm")
        {'epoch': 2, 'val_loss': 0.5}
        >>> parse_line("step 40: val loss 1.25", [re.compile(r"step (?P<step>\\d+): val loss (?P<val_loss>\\S+)")])
        {'step': 40, 'val_loss': 1.25}
        >>> parse_line("\\r   \\r\\x1b[A{'eval_loss': '1.072', 'epoch': '3.333'}")
        {'eval_loss': 1.072, 'epoch': 3.333}
    """
    return _parse(line, patterns)[0]


def _parse(line: str, patterns: Sequence[re.Pattern[str]]) -> tuple[dict[str, Any], bool]:
    """The line's metrics, and whether they came from a dict (JSON or Python)."""
    line = shown(line)
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
        return out, False
    text = line.strip()
    if text.startswith("{") and text.endswith("}"):
        found = _dict_literal(text)
        if found is not None:
            values = {str(k): numeric(v) for k, v in found.items()}
            return {k: v for k, v in values.items() if v is not None}, True
    for key, value in _PAIR.findall(line):
        parsed = number(value)
        if parsed is not None:
            out[key] = parsed
    return out, False


def _dict_literal(text: str) -> dict | None:
    """A JSON object or a Python dict literal (read as data: nothing is evaluated)."""
    try:
        found = json.loads(text)
    except ValueError:
        found = None
        if len(text) <= _DICT_MAX:
            try:
                found = ast.literal_eval(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                found = None
    return found if isinstance(found, dict) else None


def _bar_steps(line: str) -> list[int]:
    """The counts of the top-level tqdm bar states in ``line``, in order (a nested bar's
    state ends with a cursor-up and is left out)."""
    steps = []
    for segment in line.rstrip("\r\n").split("\r"):
        if _CURSOR_UP in segment:
            continue
        match = _BAR.search(_ANSI.sub("", segment))
        if match is not None:
            steps.append(int(match.group(1)))
    return steps


def _leading_bar_step(line: str) -> int | None:
    """The bar count of ``line``'s first non-blank state, when that state is a top-level
    bar (tqdm's redraw right after a message it wrote)."""
    for segment in line.rstrip("\r\n").split("\r"):
        if not _ANSI.sub("", segment).strip():
            continue
        if _CURSOR_UP in segment:
            return None
        match = _BAR.search(_ANSI.sub("", segment))
        return int(match.group(1)) if match else None
    return None


class OutputReader:
    """Reads one trial's output, line by line, into reports (see the module docstring).

    Args:
        patterns: The ``metrics`` patterns (empty: dicts, ``key=value`` and JSON lines).
        objective: The objective metric: a line that has it is a report.
        time_key: The scheduler's time attribute (``step`` or ``epoch``); ``None`` for
            ``time``, which Tune measures itself.
    """

    def __init__(self, patterns: Sequence[str], *, objective: str, time_key: str | None,
                 clock=time.monotonic):  # noqa: ANN001
        self._patterns = compile_patterns(patterns)
        self._objective = objective
        self._time_key = time_key
        self._pending: dict[str, Any] = {}
        self._time: Any = None
        self._bar: int | None = None  # the training bar's last count shown
        self._waiting: tuple[dict[str, Any], float] | None = None  # a dict awaiting its bar
        self._last: tuple[Any, Any] | None = None
        self._clock = clock
        self.reports = 0
        self.seen: set[str] = set()  # every metric name read, for "never reported" errors
        self.time_from: set[str] = set()  # where reports' times came from, for messages

    def feed(self, line: str) -> list[dict[str, Any]]:
        """The reports this line completes (most lines: none)."""
        out: list[dict[str, Any]] = []
        if self._waiting is not None and shown(line).strip():  # a blank line: wait on
            step = _leading_bar_step(line)
            out += self._settle(step if step is not None else self._bar)
        if not self._patterns:
            steps = _bar_steps(line)
            if steps:
                self._bar = steps[-1]
        found, from_dict = _parse(line, self._patterns)
        return out + self.take(found, from_dict=from_dict)

    def take(self, found: dict[str, Any], *, from_dict: bool = False) -> list[dict[str, Any]]:
        """The reports one record of metrics completes (a parsed line, a file's row)."""
        out: list[dict[str, Any]] = []
        if not found:
            return out
        self.seen.update(found)
        if self._time_key and self._time_key in found:
            self._time = found[self._time_key]
        self._pending.update(found)
        if self._objective not in found:
            return out
        report, self._pending = self._pending, {}
        if (self._time_key == "step" and "step" not in report and from_dict
                and self._bar is not None):
            self._waiting = (report, self._clock())
            return out
        return out + self._emit(report)

    def tick(self) -> list[dict[str, Any]]:
        """A report that waited for its bar's redraw longer than :data:`BAR_WAIT_S`,
        with the bar's last count (call it now and then while no line comes)."""
        if self._waiting is not None and self._clock() - self._waiting[1] > BAR_WAIT_S:
            return self._settle(self._bar)
        return []

    def finish(self) -> list[dict[str, Any]]:
        """The report still waiting when the output ends."""
        return self._settle(self._bar) if self._waiting is not None else []

    def _settle(self, step: int | None) -> list[dict[str, Any]]:
        report, _ = self._waiting  # type: ignore[misc]
        self._waiting = None
        if step is None:
            return self._emit(report)
        report["step"] = step
        return self._emit(report, source="the training progress bar")

    def _emit(self, report: dict[str, Any], source: str = "the output") -> list[dict[str, Any]]:
        counted = False  # a time hpsearch counted, not one the script printed
        if self._time_key and self._time_key not in report:
            if self._time is not None:
                report[self._time_key] = self._time
                self.time_from.add(f"the last {self._time_key} printed")
                counted = True
            else:
                report[self._time_key] = self.reports + 1
                self.time_from.add("a count of the reports")
            counted = True
        elif self._time_key:
            self.time_from.add(source)
        key = (None if counted or not self._time_key else report[self._time_key],
               report.get(self._objective))
        if key == self._last:
            return []  # a progress bar redrawn with the same values
        self._last = key
        self.reports += 1
        return [report]
