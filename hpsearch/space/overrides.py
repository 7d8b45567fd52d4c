"""``--set key.path=value`` overrides, shared by ``validate``, ``run`` and ``trial``."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hpsearch.errors import SpaceError, SpaceIssue
from hpsearch.space._schema import show, suggest
from hpsearch.space._validate import SECTIONS
from hpsearch.space._yaml import load_yaml_value

__all__ = ["Override", "apply_overrides", "option_overrides", "parse_overrides"]


@dataclass(frozen=True)
class Override:
    """One parsed ``--set`` item.

    Attributes:
        path: Key path in the space mapping, e.g. ``("params", "lr", "high")``.
        value: The value parsed as YAML.
        text: The item as written, for messages.
    """

    path: tuple[str, ...]
    value: Any
    text: str


def apply_overrides(raw: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with each ``key.path=value`` item applied in order.

    Values are read as YAML scalars or flow collections, so ``trials.num=4`` sets an
    integer and ``params.precision.choices=[fp32,bf16]`` a list. Setting a searched
    parameter to a plain value fixes it (``params.precision=bf16``). When the first key is
    not a section name it names a parameter: ``lr=0.01`` means ``params.lr=0.01``.

    Args:
        raw: The space mapping as read from YAML. It is not modified.
        overrides: Items of the form ``key.path=value``.

    Returns:
        A new mapping with the overrides applied.

    Raises:
        SpaceError: Some items are malformed, name nothing in the space, or would set a key
            inside a plain value. Every such item is reported, each with path ``--set``.

    Example:
        >>> apply_overrides({"params": {"lr": {"type": "float", "low": 0.1, "high": 1}}},
        ...                 ["lr=0.5"])
        {'params': {'lr': 0.5}}
    """
    out, _ = _apply(raw, parse_overrides(raw, overrides))
    return out


def option_overrides(*, trials: int | None = None, time_budget: str | None = None,
                     deadline: str | None = None, warm_start: Iterable[str] = ()) -> list[str]:
    """The ``key.path=value`` items that ``run`` and ``resume``'s own options stand for:
    ``--trials``, ``--time-budget``, ``--deadline``, ``--warm-start`` (each only if given).

    Example:
        >>> option_overrides(trials=8, deadline="07:00")
        ['trials.num=8', 'budget.deadline=07:00']
    """
    out = [f"trials.num={trials}"] if trials is not None else []
    if time_budget is not None:
        out.append(f"budget.time={time_budget}")
    if deadline is not None:
        out.append(f"budget.deadline={deadline}")
    sources = list(warm_start)
    if sources:
        out.append(f"search.warm_start=[{','.join(sources)}]")
    return out


def parse_overrides(raw: Mapping[str, Any], overrides: Iterable[str]) -> list[Override]:
    """Parse ``--set`` items against ``raw`` (for the short form); raise on malformed ones."""
    if isinstance(overrides, str):
        overrides = [overrides]
    params = raw.get("params") if isinstance(raw, Mapping) else None
    param_names = list(params) if isinstance(params, Mapping) else []
    parsed, issues = [], []
    for item in overrides:
        try:
            parsed.append(_parse_one(item, param_names))
        except ValueError as exc:
            issues.append(SpaceIssue("--set", "override", str(exc)))
    if issues:
        raise SpaceError(issues)
    return parsed


def _parse_one(item: Any, param_names: list[str]) -> Override:
    if not isinstance(item, str):
        raise ValueError(f"expected KEY.PATH=VALUE (got {item!r})")
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key:
        raise ValueError(f"expected KEY.PATH=VALUE, e.g. trials.num=4 (got {item!r})")
    parts = tuple(p.strip() for p in key.split("."))
    if any(not p for p in parts):
        raise ValueError(f"empty key in {key!r}; separate keys with single dots, "
                         "e.g. params.lr.high=0.1")
    if not text:
        raise ValueError(f"no value after '=' in {item!r}; write null to clear a key")
    if parts[0] not in SECTIONS:
        if parts[0] not in param_names:
            close = suggest(parts[0], [*SECTIONS, *param_names])
            hint = f"; did you mean `{close}`?" if close else ""
            raise ValueError(f"`{parts[0]}` (in {item!r}) is neither a section nor a "
                             f"parameter of this space{hint}")
        parts = ("params", *parts)
    try:
        value = load_yaml_value(text)
    except ValueError as exc:
        raise ValueError(f"cannot read the value of {item!r}: {exc}") from None
    return Override(path=parts, value=value, text=item.strip())


def _apply(raw: Mapping[str, Any], overrides: list[Override]) -> tuple[dict, list[Override]]:
    out = copy.deepcopy(dict(raw)) if isinstance(raw, Mapping) else {}
    issues = []
    for override in overrides:
        node: Any = out
        for depth, part in enumerate(override.path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(override.path[: depth + 1])
                issues.append(SpaceIssue("--set", "override", (
                    f"cannot set `{'.'.join(override.path)}` (in {override.text!r}): `{where}` "
                    f"is {show(child)}, not a mapping; set `{where}` itself instead")))
                break
            node = child
        else:
            node[override.path[-1]] = copy.deepcopy(override.value)
    if issues:
        raise SpaceError(issues)
    return out, overrides
