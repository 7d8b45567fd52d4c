"""One searched parameter's definition, by its type: a ``float`` or ``int`` range, or
``categorical`` choices (the frozen types, re-exported by :mod:`hpsearch.space.spec`, and
their readers); and the check that every value passed to a trial as written (a
fixed value, a choice) goes through.

Each reader reports every problem of its definition and returns the parameter, or
:data:`BAD`. Which keys each type takes, fixed values and ``when`` conditions are read in
:mod:`._params`.
"""

from __future__ import annotations

import math
from decimal import Decimal
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Union

from hpsearch.space._schema import BAD, Report, got, is_scalar, ok, show
from hpsearch.space._yaml import REJECTED, Index

__all__ = ["CategoricalParam", "Condition", "FloatParam", "IntParam", "Param", "check_plain",
           "read_categorical", "read_float", "read_int"]


@dataclass(frozen=True)
class Condition:
    """Sample a parameter only when ``param``'s value is one of ``values``.

    Written in YAML as ``when: {precision: fp16}`` or ``when: {precision: [fp16, bf16]}``.
    """

    param: str
    values: tuple[Any, ...]

    def holds(self, config: Mapping[str, Any]) -> bool:
        return self.param in config and config[self.param] in self.values


@dataclass(frozen=True)
class _Range:
    """The fields a float and an int parameter share, in the order both have them: a
    range from ``low`` to ``high``, on a log scale or not."""

    name: str
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class FloatParam(_Range):
    step: float | None = None
    when: Condition | None = None
    type: Literal["float"] = "float"

    def midpoint(self) -> float:
        if self.log:
            return float((self.low * self.high) ** 0.5)
        mid = (self.low + self.high) / 2
        if self.step:
            mid = self.low + round((mid - self.low) / self.step) * self.step
        return float(mid)

    def describe(self) -> str:
        scale = "log" if self.log else "linear"
        step = f", step {self.step:g}" if self.step else ""
        return f"float [{self.low:g}, {self.high:g}] {scale}{step}"


@dataclass(frozen=True)
class IntParam(_Range):
    """Integer parameter; ``low`` and ``high`` are both inclusive."""

    low: int  # ints here; declared again, they keep their place in _Range's order
    high: int
    step: int = 1
    when: Condition | None = None
    type: Literal["int"] = "int"

    def midpoint(self) -> int:
        if self.log:
            mid = (self.low * self.high) ** 0.5
        else:
            mid = (self.low + self.high) / 2
        return int(self.low + round((mid - self.low) / self.step) * self.step)

    def describe(self) -> str:
        scale = "log" if self.log else "linear"
        step = f", step {self.step}" if self.step != 1 else ""
        return f"int [{self.low}, {self.high}] {scale}{step}"


@dataclass(frozen=True)
class CategoricalParam:
    name: str
    choices: tuple[Any, ...]
    when: Condition | None = None
    type: Literal["categorical"] = "categorical"

    def midpoint(self) -> Any:
        return self.choices[0]

    def describe(self) -> str:
        return "one of " + ", ".join(str(c) for c in self.choices)


Param = Union[FloatParam, IntParam, CategoricalParam]

_INT_LIMIT = 2**53  # above this, Optuna's float arithmetic loses integers
_MAX_STEPS = 1e12  # values on a stepped float range; beyond, decimal arithmetic overflows


def check_plain(value: Any, path: tuple, report: Report, *, what: str,
                containers: bool = False, hint: str = "", range_what: str | None = None) -> bool:
    """Whether ``value`` can be passed to a trial as written: a string, number, boolean
    or null (or, with ``containers``, a list or a mapping) and not an infinite or NaN
    float. Reports why not.

    Args:
        what: The value as the type message names it (``"a choice"``).
        hint: Added to the type message.
        range_what: The value as the range message names it; ``what`` by default.
    """
    if not is_scalar(value) and not (containers and isinstance(value, (list, tuple, Mapping))):
        report.add(path, "type", f"{what} must be a string, number, boolean or null "
                   f"{got(value)}{hint}")
        return False
    if isinstance(value, float) and not math.isfinite(value):
        named = f"{what} " if range_what is None else range_what
        report.add(path, "range", f"{named}must be a finite number (got {show(value)})")
        return False
    return True


def read_float(name: str, spec: Mapping, path: tuple, report: Report) -> Any:
    low = report.number(spec, path, "low")
    high = report.number(spec, path, "high")
    log = report.flag(spec, path, "log", default=False)
    step = report.number(spec, path, "step", default=None, above=0)
    if ok(low, high):
        if not math.isfinite(high - low):
            high = report.add(path + ("high",), "range", f"high - low must be a finite number "
                              f"(got low {show(low)}, high {show(high)})")
        elif low >= high:
            high = report.add(path + ("high",), "range", f"must be greater than low "
                              f"(got high {show(high)}, low {show(low)})")
    if log is True:
        if ok(low) and low <= 0:
            low = report.add(path + ("low",), "range",
                             f"must be > 0 when log is true (got {show(low)})")
        if ok(high) and high <= 0:
            high = report.add(path + ("high",), "range",
                              f"must be > 0 when log is true (got {show(high)})")
        if step is not None and ok(step):
            step = report.add(path + ("step",), "conflict", "cannot be combined with `log: "
                              "true`; Optuna samples a log scale without steps")
    elif step is not None and ok(low, high, step):
        span = high - low
        if _decimal(step) > _decimal(high) - _decimal(low):  # exact: 0.95 - 0.9 < 0.05 in floats
            step = report.add(path + ("step",), "range", f"must be <= high - low "
                              f"({span:g}) (got {show(step)})")
        elif span / step > _MAX_STEPS:
            step = report.add(path + ("step",), "range", f"is too small for the range: (high - "
                              f"low) / step must be at most {_MAX_STEPS:.0e} (got "
                              f"{show(step)} for a range of {span:g})")
        elif not _is_multiple(span=(low, high), step=step):
            step = report.add(path + ("step",), "range", f"high - low ({span:g}) must be a "
                              f"multiple of step (got {show(step)})")
    if not ok(low, high, log, step):
        return BAD
    return FloatParam(name=name, low=float(low), high=float(high), log=log,
                      step=float(step) if step is not None else None)


def _decimal(x: float) -> Decimal:
    """The number as written (``0.95``), not its binary float."""
    return Decimal(repr(float(x)))


def _is_multiple(*, span: tuple[float, float], step: float) -> bool:
    low, high = (_decimal(x) for x in span)
    return (high - low) % _decimal(step) == 0


def read_int(name: str, spec: Mapping, path: tuple, report: Report) -> Any:
    low = report.integer(spec, path, "low", minimum=-_INT_LIMIT, maximum=_INT_LIMIT)
    high = report.integer(spec, path, "high", minimum=-_INT_LIMIT, maximum=_INT_LIMIT)
    log = report.flag(spec, path, "log", default=False)
    step = report.integer(spec, path, "step", default=1, minimum=1)
    if ok(low, high) and low >= high:
        high = report.add(path + ("high",), "range",
                          f"must be greater than low (got high {high}, low {low})")
    if log is True:
        if ok(low) and low < 1:
            low = report.add(path + ("low",), "range",
                             f"must be >= 1 when log is true (got {low})")
        if ok(step) and step != 1:
            step = report.add(path + ("step",), "conflict", "cannot be combined with `log: "
                              f"true` (got step {step}); Optuna samples a log scale without "
                              "steps")
    elif ok(low, high, step) and step != 1:
        span = high - low
        if step > span:
            step = report.add(path + ("step",), "range",
                              f"must be <= high - low ({span}) (got {step})")
        elif span % step:
            last = low + span // step * step
            step = report.add(path + ("step",), "range", f"high - low ({span}) must be a "
                              f"multiple of step (got {step}); the largest value reached would "
                              f"be {last}, so set high to {last} or {last + step}")
    if not ok(low, high, log, step):
        return BAD
    return IntParam(name=name, low=low, high=high, log=log, step=step)


def read_categorical(name: str, spec: Mapping, path: tuple, report: Report) -> Any:
    choices = spec.get("choices")
    choices_path = path + ("choices",)
    if choices is REJECTED:
        return BAD
    if choices is None:
        what = "is missing" if "choices" not in spec else "is null"
        return report.add(choices_path, "missing", f"required key {what}; list the values, "
                          "e.g. `choices: [fp32, bf16]`")
    if not isinstance(choices, (list, tuple)):
        hint = f"; write [{show(choices)}]" if is_scalar(choices) else ""
        return report.add(choices_path, "type", f"expected a list of values {got(choices)}{hint}")
    if not choices:
        return report.add(choices_path, "empty", "must list at least one value")
    valid = True
    first_index: dict[Any, int] = {}  # value -> index of its first occurrence: one pass
    for i, choice in enumerate(choices):
        if not _check_choice(choice, choices, i, choices_path, report, first_index):
            valid = False
    return CategoricalParam(name=name, choices=tuple(choices)) if valid else BAD


def _check_choice(choice: Any, choices: list, i: int, path: tuple, report: Report,
                  first_index: dict[Any, int]) -> bool:
    here = path + (Index(i),)
    if choice is REJECTED:
        return False
    if not check_plain(choice, here, report, what="a choice"):
        return False
    j = first_index.setdefault(choice, i)  # dict keys compare as Python does: 1 == 1.0 == True
    if j != i:
        if show(choices[j]) == show(choice):
            message = f"duplicate choice {show(choice)} (same as choices[{j}])"
        else:
            message = (f"duplicate choice {show(choice)}: it equals choices[{j}] "
                       f"({show(choices[j])}) in Python, so Optuna cannot tell them apart")
        report.add(here, "duplicate", message)
        return False
    return True
