"""Safe YAML loading that remembers where every key came from.

PyYAML's ``safe_load`` is safe but forgetful: it drops line numbers, keeps the last of two
duplicate keys without a word, and reads ``1e-4`` as a string and ``1:30`` as 90. This
module composes the node graph with a :class:`yaml.SafeLoader` subclass and builds plain
Python values from it by hand, so that it can

* record the line of every key path (``("params", "lr", "low") -> 6``),
* report duplicate keys, tags outside the safe core (``!!python/object/apply``, ``!!set``)
  and recursive aliases as issues instead of silently accepting them,
* resolve scalars as YAML 1.2 does (``1e-4`` is a float; ``1:30`` and ``yes`` are strings).

Nothing here raises on bad input: problems come back as :class:`SpaceIssue` objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from hpsearch.errors import SpaceIssue

__all__ = ["REJECTED", "Document", "Index", "format_path", "parse_yaml", "load_yaml_value"]

Path = tuple[Any, ...]



class _Rejected:
    """Type of :data:`REJECTED`; copies and pickles to the same object."""

    def __repr__(self) -> str:
        return "<rejected>"

    def __copy__(self) -> _Rejected:
        return self

    def __deepcopy__(self, memo: dict) -> _Rejected:
        return self

    def __reduce__(self) -> str:
        return "REJECTED"


#: Stands in for a value that was already reported (a forbidden tag, a recursive alias).
#: Validation treats it as invalid without reporting it a second time.
REJECTED: Any = _Rejected()

_MAX_VALUES = 100_000
_MAX_DEPTH = 32
_CORE = "tag:yaml.org,2002:"
_ALLOWED_TAGS = {
    _CORE + name for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")
}
_MERGE_TAG = _CORE + "merge"

_INT = re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?0b[01_]+)$")
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 number resolution (no base-60 ints, ``1e-4`` is a float)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in (_CORE + "int", _CORE + "float", _CORE + "bool")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# YAML 1.2 booleans only: `yes`, `no`, `on`, `off` stay strings (choices: [on, off] is not
# [true, false]).
_Loader.add_implicit_resolver(_CORE + "bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))
_Loader.add_implicit_resolver(_CORE + "int", _INT, list("-+0123456789"))
_Loader.add_implicit_resolver(_CORE + "float", _FLOAT, list("-+0123456789."))


# libyaml's parser (C) when PyYAML has it: the same nodes and marks, about 10x faster on a
# file of 90,000 choices. Resolvers and constructors stay the Python ones above.
if getattr(yaml, "__with_libyaml__", False):
    class _FastLoader(yaml.CSafeLoader):
        """:class:`_Loader`'s rules over libyaml's parser."""

    _FastLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers
else:  # pragma: no cover - PyYAML built without libyaml
    _FastLoader = _Loader


@dataclass
class Document:
    """A parsed YAML document: its value, where each key path was written, what went wrong.

    Attributes:
        value: Plain Python data (dicts, lists, scalars); ``None`` for an empty document.
        lines: 1-based line of each key path that appears in the file.
        issues: Problems found while reading (syntax, duplicates, forbidden tags...).
        rejected: Key paths whose value was replaced by :data:`REJECTED`.
    """

    value: Any = None
    lines: dict[Path, int] = field(default_factory=dict)
    issues: list[SpaceIssue] = field(default_factory=list)
    rejected: set[Path] = field(default_factory=set)


class Index(int):
    """A list index in a key path (a plain ``int`` there is a mapping key such as ``64:``)."""


def format_path(path: Path) -> str:
    """``("params", "lr", "choices", Index(2))`` -> ``"params.lr.choices[2]"``."""
    out = ""
    for part in path:
        if isinstance(part, Index):
            out += f"[{int(part)}]"
        else:
            text = part if isinstance(part, str) else _yaml_scalar(part)
            out += ("." if out else "") + text
    return out


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_yaml(text: str, *, file: str | None = None) -> Document:
    """Parse ``text`` into a :class:`Document`; never raises on malformed input."""
    doc = Document()
    loader = None
    try:
        loader = _FastLoader(text)
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        doc.issues.append(_syntax_issue(exc, file))
        return doc
    except yaml.YAMLError as exc:  # ReaderError: a character YAML does not allow
        doc.issues.append(_reader_issue(exc, text, file))
        return doc
    except RecursionError:
        doc.issues.append(_too_deep(file))
        return doc
    finally:
        if loader is not None:
            loader.dispose()
    if node is not None:
        builder = _Builder(loader, doc, file)
        try:
            doc.value = builder.build(node, ())
        except _TooLarge:
            doc.value = None
            doc.issues = [SpaceIssue("", "yaml", f"the file expands to more than {_MAX_VALUES} "
                                     "values (aliases nested too deeply?)", file, None)]
        except RecursionError:
            doc.value = None
            doc.issues = [_too_deep(file)]
    return doc


def _too_deep(file: str | None) -> SpaceIssue:
    return SpaceIssue("", "yaml", "the file nests lists or mappings too deeply to read", file,
                      None)


def load_yaml_value(text: str) -> Any:
    """Parse one YAML scalar or flow value (as given to ``--set``) with the same rules.

    Raises:
        ValueError: The text is not valid YAML, or uses a tag or construct a space file may
            not use. The message is one line.
    """
    doc = parse_yaml(text)
    if doc.issues:
        message = doc.issues[0].message
        raise ValueError(message)
    return doc.value


class _TooLarge(Exception):
    pass


class _Builder:
    """Turns a composed node graph into plain data, recording lines and issues."""

    def __init__(self, loader: _Loader, doc: Document, file: str | None):
        self._loader = loader
        self._doc = doc
        self._file = file
        self._count = 0
        self._active: set[int] = set()
        self._merged: dict[int, int] = {}

    def build(self, node: yaml.Node, path: Path) -> Any:
        self._count += 1
        if self._count > _MAX_VALUES:
            raise _TooLarge
        line = node.start_mark.line + 1
        if node.tag not in _ALLOWED_TAGS:
            return self._reject(path, line, "tag", f"the tag {_show_tag(node.tag)} is not "
                                "allowed; a space file holds only mappings, lists and scalars")
        if len(path) > _MAX_DEPTH:
            return self._reject(path, line, "yaml", f"nested more than {_MAX_DEPTH} levels deep")
        if id(node) in self._active:
            return self._reject(path, line, "yaml", "an alias refers to a value that contains "
                                "itself (recursive anchor)")
        if isinstance(node, yaml.ScalarNode):
            try:
                return self._loader.construct_object(node, deep=True)
            except (yaml.YAMLError, ValueError) as exc:  # e.g. "!!int abc"
                return self._reject(path, line, "type", f"cannot read {node.value!r} as "
                                    f"{_show_tag(node.tag)}: {_one_line(exc)}")
        self._active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self._at(item, path + (Index(i),)) for i, item in enumerate(node.value)]
            return self._build_mapping(node, path)
        finally:
            self._active.discard(id(node))

    def _at(self, node: yaml.Node, path: Path) -> Any:
        self._doc.lines.setdefault(path, node.start_mark.line + 1)
        return self.build(node, path)

    def _build_mapping(self, node: yaml.MappingNode, path: Path) -> Any:
        if id(node) not in self._merged:
            explicit = sum(1 for key, _ in node.value if key.tag != _MERGE_TAG)
            try:
                self._loader.flatten_mapping(node)
            except yaml.MarkedYAMLError as exc:
                return self._reject(path, node.start_mark.line + 1, "yaml",
                                    f"invalid merge key `<<`: {exc.problem}")
            self._merged[id(node)] = len(node.value) - explicit
        n_merged = self._merged[id(node)]
        out: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        for i, (key_node, value_node) in enumerate(node.value):
            key_line = key_node.start_mark.line + 1
            key = self._build_key(key_node, path)
            if key is REJECTED:
                continue
            key_path = path + (key,)
            if i >= n_merged and key in first_line:
                self._doc.issues.append(SpaceIssue(
                    format_path(key_path), "duplicate_key",
                    f"duplicate key `{key}` (first defined on line {first_line[key]}); "
                    "the later value would silently win", self._file, key_line,
                ))
            if i >= n_merged:
                first_line.setdefault(key, key_line)
            self._doc.lines[key_path] = key_line
            out[key] = self.build(value_node, key_path)
        return out

    def _build_key(self, node: yaml.Node, path: Path) -> Any:
        line = node.start_mark.line + 1
        if not isinstance(node, yaml.ScalarNode):
            kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
            self._issue(path, line, "type", f"a key must be a plain name, not {kind}")
            return REJECTED
        key = self.build(node, path)
        if key is REJECTED:
            return REJECTED
        try:
            hash(key)
        except TypeError:
            self._issue(path, line, "type", f"a key must be a plain name (got {key!r})")
            return REJECTED
        return key

    def _reject(self, path: Path, line: int, kind: str, message: str) -> Any:
        self._issue(path, line, kind, message)
        self._doc.rejected.add(path)
        return REJECTED

    def _issue(self, path: Path, line: int, kind: str, message: str) -> None:
        self._doc.issues.append(SpaceIssue(format_path(path), kind, message, self._file, line))


def _show_tag(tag: str | None) -> str:
    tag = tag or "?"
    return "!!" + tag[len(_CORE):] if tag.startswith(_CORE) else tag


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


def _syntax_issue(exc: yaml.MarkedYAMLError, file: str | None) -> SpaceIssue:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "invalid YAML"
    if "expected a single document" in str(exc.context):
        problem = "the file holds more than one YAML document (`---`); keep one"
    elif "'\\t'" in problem:
        problem += " (YAML does not allow tabs for indentation; use spaces)"
    elif exc.context and exc.problem and exc.context != "while scanning for the next token":
        problem += f" ({exc.context}"
        if exc.context_mark is not None and mark is not None and exc.context_mark.line != mark.line:
            problem += f" started on line {exc.context_mark.line + 1}"
        problem += ")"
    line = mark.line + 1 if mark is not None else None
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return SpaceIssue("", "yaml", f"invalid YAML{where}: {problem}", file, line)


def _reader_issue(exc: yaml.YAMLError, text: str, file: str | None) -> SpaceIssue:
    position = getattr(exc, "position", None)
    character = getattr(exc, "character", None)
    line = text.count("\n", 0, position) + 1 if isinstance(position, int) else None
    if isinstance(character, int):
        what = f"the character U+{character:04X}"
    else:
        what = "a character"
    message = f"{what} is not allowed in YAML (control characters cannot appear in a space file)"
    return SpaceIssue("", "encoding", message, file, line)
