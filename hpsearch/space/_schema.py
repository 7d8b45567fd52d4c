"""Typed readers for space-file mappings that collect issues instead of raising.

Every reader takes the mapping, its key path and a key, and returns either the value
(or the default) or :data:`BAD`. Each problem is recorded once, with the key path, a
category (``kind``), the rule and the value received. :mod:`._validate` builds the spec
from these readers; nothing here knows about particular sections.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

from hpsearch.errors import SpaceIssue
from hpsearch.space._yaml import REJECTED, Index, format_path

Path = tuple[Any, ...]
Locate = Callable[[Path], "tuple[str | None, int | None]"]

#: Returned by a reader when the value is invalid (the issue is already recorded).
BAD: Any = type("Bad", (), {"__repr__": lambda self: "<bad>", "__bool__": lambda self: False})()
#: Default that marks a key as required.
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "<required>"})()

#: The largest count (trials, workers, epochs...) a space may ask for.
MAX_COUNT = 2**31 - 1

# The kinds of issue, as tests and tools can rely on them (documented in space-format.md).
KINDS = (
    "file", "encoding", "yaml", "tag", "duplicate_key", "empty", "type", "missing",
    "unknown_key", "choice", "range", "duplicate", "conflict", "condition", "name",
    "format", "trainable", "command", "harness", "storage", "override", "track",
)


def show(value: Any, *, limit: int = 60) -> str:
    """Write ``value`` as it would appear in YAML, shortened to ``limit`` characters."""
    text = _show(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_plain(k)}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _plain(key: Any) -> str:
    return key if isinstance(key, str) else _show(key)


def kind_of(value: Any) -> str:
    """``"a string"``, ``"a boolean"``, ``"a mapping"``... for messages."""
    if value is None:
        return "null"
    for types, name in (
        (bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
        (Mapping, "a mapping"), ((list, tuple), "a list"),
    ):
        if isinstance(value, types):
            return name
    return f"a {type(value).__name__}"


def got(value: Any) -> str:
    """``(got 'abc', a string)`` for scalars, ``(got a mapping)`` for collections."""
    if isinstance(value, (Mapping, list, tuple)) or value is None:
        return f"(got {kind_of(value)})" if value is not None else "(got null)"
    return f"(got {show(value)}, {kind_of(value)})"


def suggest(word: Any, options: Iterable[str]) -> str | None:
    """The option ``word`` most likely stands for: same letters in another case, a
    prefix either way (``minimize`` -> ``min``), or the closest by :mod:`difflib`."""
    options = list(options)
    if not isinstance(word, str) or not word:
        return None
    lower = word.lower()
    for option in options:
        if option.lower() == lower:
            return option
    prefixed = [o for o in options if lower.startswith(o.lower()) or o.lower().startswith(lower)]
    if len(prefixed) == 1 and min(len(lower), len(prefixed[0])) >= 2:
        return prefixed[0]
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return close[0] if close else None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def ok(*values: Any) -> bool:
    """Whether no value is :data:`BAD`."""
    return all(v is not BAD for v in values)


class Report:
    """Collects :class:`SpaceIssue` objects and reads typed values.

    Args:
        locate: Maps a key path to ``(file, line)`` for the message.
        rejected: Key paths already reported while reading the YAML; issues at or below
            them are not reported again.
        overridden: Key paths set by ``--set`` overrides.
    """

    def __init__(self, locate: Locate, rejected: Iterable[Path] = (),
                 overridden: Iterable[Path] = ()):
        self.issues: list[SpaceIssue] = []
        self._locate = locate
        self._rejected = set(rejected)
        self._overridden = set(overridden)

    def is_overridden(self, path: Path) -> bool:
        """Whether ``path`` (or a key above it) was set by a ``--set`` override."""
        return any(path[:i] in self._overridden for i in range(len(path) + 1))

    def add(self, path: Path, kind: str, message: str) -> Any:
        """Record an issue; returns :data:`BAD` so readers can ``return report.add(...)``."""
        if not any(path[:i] in self._rejected for i in range(len(path) + 1)):
            file, line = self._locate(path)
            self.issues.append(SpaceIssue(format_path(path), kind, message, file, line))
        return BAD

    # -- structure -------------------------------------------------------------------

    def listed(self, value: Any, path: Path, read_one: Callable[[Any, Path], Any]) -> Any:
        """A value that is one item or a list of them (``metrics: PATTERN`` or
        ``metrics: [A, B]``): each item read by ``read_one(item, its key path)``, which
        returns what to keep or :data:`BAD`. The list of what it kept (``[]`` when the key
        is absent), or :data:`BAD` at the first bad item."""
        if value is None:
            return []
        if value is REJECTED:
            return BAD
        several = isinstance(value, (list, tuple))
        out = []
        for i, item in enumerate(value if several else [value]):
            kept = read_one(item, path + (Index(i),) if several else path)
            if kept is BAD:
                return BAD
            out.append(kept)
        return out

    def mapping(self, value: Any, path: Path, *, example: str) -> Mapping | Any:
        """``value`` if it is a mapping, else an issue naming the expected shape."""
        if value is REJECTED:
            return BAD
        if not isinstance(value, Mapping):
            return self.add(path, "type", f"expected a mapping such as {example} {got(value)}")
        return value

    def section(self, raw: Mapping, key: str, *, example: str, required: bool = False) -> Any:
        """A top-level section: ``{}`` if absent or null (unless required), else a mapping."""
        value = raw.get(key)
        if value is None:
            if required:
                what = "is missing" if key not in raw else "is null"
                return self.add((key,), "missing", f"required section {what}; add e.g. "
                                f"`{key}: {example}`")
            return {}
        return self.mapping(value, (key,), example=example)

    def reject_unknown_keys(self, mapping: Mapping, path: Path, allowed: Sequence[str],
                            *, what: str = "key") -> bool:
        """Report every key of ``mapping`` not in ``allowed``; True if there were none."""
        clean = True
        for key in mapping:
            if key in allowed and isinstance(key, str):
                continue
            clean = False
            close = suggest(key, allowed)
            hint = f"did you mean `{close}`?" if close else f"valid {what}s: " + ", ".join(allowed)
            self.add(path + (key,), "unknown_key", f"unknown {what} `{_plain(key)}`; {hint}")
        return clean

    # -- scalars ---------------------------------------------------------------------

    def _value(self, mapping: Mapping, path: Path, key: str, default: Any) -> tuple[Any, bool]:
        """(value, present). A null value counts as absent: it asks for the default."""
        value = mapping.get(key)
        if value is REJECTED:
            return BAD, False
        if value is None:
            if default is REQUIRED:
                what = "is missing" if key not in mapping else "is null"
                return self.add(path + (key,), "missing", f"required key {what}"), False
            return default, False
        return value, True

    def integer(self, mapping: Mapping, path: Path, key: str, *, default: Any = REQUIRED,
                minimum: int | None = None, maximum: int = MAX_COUNT) -> Any:
        value, present = self._value(mapping, path, key, default)
        if not present:
            return value
        return self.check_integer(value, path + (key,), minimum=minimum, maximum=maximum)

    def check_integer(self, value: Any, path: Path, *, minimum: int | None = None,
                      maximum: int = MAX_COUNT) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            hint = ""
            if isinstance(value, float) and value.is_integer():
                hint = f"; write {int(value)} without a decimal point or exponent"
            return self.add(path, "type", f"expected an integer {got(value)}{hint}")
        if minimum is not None and value < minimum:
            return self.add(path, "range", f"must be >= {minimum} (got {value})")
        if value > maximum:
            return self.add(path, "range", f"must be <= {maximum} (got {value})")
        return value

    def number(self, mapping: Mapping, path: Path, key: str, *, default: Any = REQUIRED,
               minimum: float | None = None, above: float | None = None) -> Any:
        value, present = self._value(mapping, path, key, default)
        if not present:
            return value
        return self.check_number(value, path + (key,), minimum=minimum, above=above)

    def check_number(self, value: Any, path: Path, *, minimum: float | None = None,
                     above: float | None = None) -> Any:
        if not is_number(value):
            return self.add(path, "type", f"expected a number {got(value)}")
        if not math.isfinite(value):
            return self.add(path, "range", f"must be a finite number (got {show(value)})")
        if minimum is not None and value < minimum:
            return self.add(path, "range", f"must be >= {minimum:g} (got {show(value)})")
        if above is not None and value <= above:
            return self.add(path, "range", f"must be > {above:g} (got {show(value)})")
        return value

    def flag(self, mapping: Mapping, path: Path, key: str, *, default: bool) -> Any:
        value, present = self._value(mapping, path, key, default)
        if present and not isinstance(value, bool):
            hint = ""
            if isinstance(value, str) and value.lower() in ("yes", "no", "on", "off", "y", "n"):
                hint = "; write true or false (YAML 1.2 reads yes/no/on/off as strings)"
            return self.add(path + (key,), "type", f"expected true or false {got(value)}{hint}")
        return value

    def text(self, mapping: Mapping, path: Path, key: str, *, default: Any = REQUIRED) -> Any:
        value, present = self._value(mapping, path, key, default)
        if not present:
            return value
        if not isinstance(value, str):
            return self.add(path + (key,), "type", f"expected a string {got(value)}")
        if not value.strip():
            return self.add(path + (key,), "empty", f"must not be empty (got {show(value)})")
        return value

    def option(self, mapping: Mapping, path: Path, key: str, options: Sequence[str], *,
               default: Any = REQUIRED) -> Any:
        value, present = self._value(mapping, path, key, default)
        if not present:
            return value
        if value in options and isinstance(value, str):
            return value
        close = suggest(value, options)
        hint = f"; did you mean `{close}`?" if close else ""
        kind = "choice" if isinstance(value, str) else "type"
        return self.add(path + (key,), kind,
                        f"must be one of {', '.join(options)} {got(value)}{hint}")
