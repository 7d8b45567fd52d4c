"""Entry points: a space file or mapping (plus ``--set`` overrides) -> validated :class:`Spec`."""

from __future__ import annotations

import os
import re
import stat
from typing import Any, Iterable, Mapping

from hpsearch.errors import SpaceError, SpaceIssue
from hpsearch.space._schema import Path, Report
from hpsearch.space._validate import sort_issues, validate
from hpsearch.space._yaml import Document, parse_yaml
from hpsearch.space.overrides import Override, _apply, parse_overrides
from hpsearch.space.spec import Spec

__all__ = ["check_harness_values", "load_space", "parse_space"]

_MAX_BYTES = 1 << 20


def load_space(path: str | os.PathLike[str], overrides: Iterable[str] = (), *,
               resolve_trainable: bool = True) -> Spec:
    """Read, override and validate a space file.

    Args:
        path: The YAML file.
        overrides: ``key.path=value`` items applied before validation (see
            :func:`apply_overrides`).
        resolve_trainable: Locate a ``module:function`` trainable and read its source (never
            importing it) to check that it exists.
            Built-in names never import anything.

    Returns:
        The validated, frozen spec. ``spec.raw`` holds the mapping after overrides.

    Raises:
        SpaceError: The file cannot be read, is not valid YAML, or breaks any rule. The
            error lists every problem, each with its key path and ``file:line``.

    Example:
        >>> spec = load_space("search_spaces/quickstart.yaml", ["trials.num=4"])
        >>> spec.trials.num
        4
    """
    file = os.fspath(path)
    text = _read_text(file)
    doc = parse_yaml(text, file=file)
    return _build(doc, overrides, file=file, source=file,
                  default_name=_name_from_stem(file), resolve_trainable=resolve_trainable)


def parse_space(mapping: Mapping[str, Any], *, source: str | None = None,
                overrides: Iterable[str] = (), resolve_trainable: bool = True) -> Spec:
    """Validate a space given as a mapping (already-parsed YAML, or written in Python).

    Args:
        mapping: The space, shaped like the YAML file.
        source: Where the mapping came from, for messages and ``spec.source``; its stem is
            the default name.
        overrides: ``key.path=value`` items applied before validation.
        resolve_trainable: Locate a ``module:function`` trainable and read its source (never
            importing it) to check that it exists.

    Raises:
        SpaceError: Every problem found, with key paths.
    """
    doc = Document(value=mapping)
    default = _name_from_stem(source) if source else "space"
    return _build(doc, overrides, file=source, source=source, default_name=default,
                  resolve_trainable=resolve_trainable)


def _build(doc: Document, overrides: Iterable[str], *, file: str | None, source: str | None,
           default_name: str, resolve_trainable: bool, harness: bool | None = None) -> Spec:
    fatal = [i for i in doc.issues if i.kind in ("yaml", "encoding") and not i.path]
    if fatal:
        raise SpaceError(fatal)
    raw = doc.value
    parsed: list[Override] = []
    if isinstance(raw, Mapping) and not doc.rejected.intersection({()}):
        parsed = parse_overrides(raw, list(overrides))
        raw, parsed = _apply(raw, parsed)
    report = Report(_locator(file, doc.lines, parsed), doc.rejected, [o.path for o in parsed])
    report.issues.extend(doc.issues)
    try:
        return validate(raw, report=report, default_name=default_name, source=source,
                        resolve_trainable=resolve_trainable, harness=harness)
    except SpaceError as exc:
        raise SpaceError(sort_issues(list(exc.issues))) from None


def check_harness_values(spec: Spec) -> None:
    """Check ``spec`` against the training harness's rules for its config keys.

    ``load_space`` does this already when the trainable's source shows it is a harness
    ``Workload``; ``run`` and ``trial`` call this once they have imported a trainable that
    turned out to be one.

    Raises:
        SpaceError: A fixed value, an end of a searched range, or a choice is refused.
    """
    doc = Document(value=spec.raw)
    _build(doc, (), file=spec.source, source=spec.source,
           default_name=spec.name, resolve_trainable=False, harness=True)


def _locator(file: str | None, lines: dict[Path, int], overrides: list[Override]):
    def locate(path: Path) -> tuple[str | None, int | None]:
        for override in reversed(overrides):
            if path[: len(override.path)] == override.path:
                return f"--set {override.text}", None
        for end in range(len(path), 0, -1):
            if path[:end] in lines:
                return file, lines[path[:end]]
        return file, None

    return locate


def _read_text(file: str) -> str:
    def fail(message: str, kind: str = "file", line: int | None = None) -> SpaceError:
        # Messages name the file already; a line number is worth adding.
        return SpaceError([SpaceIssue("", kind, message, file if line else None, line)])

    try:
        mode = os.stat(file).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError
        if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
            raise fail(f"{file} is not a regular file (a pipe, socket or device); save the "
                       "space to a file")
        with open(file, "rb") as f:
            data = f.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        raise fail(f"cannot read {file}: no such file") from None
    except IsADirectoryError:
        raise fail(f"{file} is a directory, not a space file") from None
    except PermissionError:
        raise fail(f"permission denied reading {file}") from None
    except OSError as exc:
        raise fail(f"cannot read {file}: {exc.strerror or exc}") from None
    if len(data) > _MAX_BYTES:
        raise fail(f"{file} is over 1 MiB; a space file is a short YAML text")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise fail(f"{file} is UTF-16 encoded; save it as UTF-8", "encoding")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise fail(f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded; save the "
                   "file as UTF-8", "encoding", line) from None
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#")
                               for ln in text.splitlines()):
        raise fail(f"{file} is empty; a space needs at least `trainable`, `objective` and "
                   "`params`", "empty")
    return text


def _name_from_stem(file: str) -> str:
    stem = os.path.splitext(os.path.basename(file))[0]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "space"
