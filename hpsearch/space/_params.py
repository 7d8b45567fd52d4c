"""The ``params`` section: searched parameters, fixed values and conditions.

A parameter is a plain value (fixed: passed to every trial as is) or a mapping with a
``type``: ``float``, ``int``, ``categorical`` or ``fixed``. A searched parameter may carry
``when: {other: value}`` to apply only when an earlier categorical (or fixed) parameter
has one of the given values.

Conditions on a *fixed* parameter are decided here, once: the parameter is kept without
its condition if the fixed value matches, and dropped otherwise. That is how
``--set precision=bf16`` switches off ``loss_scale_init: {..., when: {precision: fp16}}``.

This layer knows no parameter by name. What values a trainable accepts for a key (the
harness's ``precision``, ``lr``, ...) comes in as ``rules``: a mapping from parameter name
to an object with ``issue(value) -> (kind, message) | None``. Fixed values, both ends of
every searched range, every choice and every condition value are checked against it.

The definition of each searched type (its range or choices) is read in :mod:`._param_types`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

from hpsearch.space._param_types import check_plain, read_categorical, read_float, read_int
from hpsearch.space._schema import BAD, Report, got, is_scalar, show, suggest
from hpsearch.space._yaml import REJECTED, Index
from hpsearch.space.spec import TRIAL_COLUMNS, CategoricalParam, Condition

__all__ = ["read_params"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TYPES = ("float", "int", "categorical", "fixed")
_KEYS = {
    "float": ("type", "low", "high", "log", "step", "when"),
    "int": ("type", "low", "high", "log", "step", "when"),
    "categorical": ("type", "choices", "when"),
    "fixed": ("type", "value"),
}
_ALL_KEYS = tuple(dict.fromkeys(k for keys in _KEYS.values() for k in keys))
_TYPE_HINTS = {
    "uniform": "write `type: float`",
    "double": "write `type: float`",
    "number": "write `type: float`",
    "real": "write `type: float`",
    "loguniform": "write `type: float` with `log: true`",
    "log_uniform": "write `type: float` with `log: true`",
    "log": "write `type: float` with `log: true`",
    "integer": "write `type: int`",
    "randint": "write `type: int`",
    "qrandint": "write `type: int` with `step`",
    "quniform": "write `type: float` with `step`",
    "choice": "write `type: categorical` with `choices: [...]`",
    "choices": "write `type: categorical` with `choices: [...]`",
    "enum": "write `type: categorical` with `choices: [...]`",
    "str": "write `type: categorical` with `choices: [...]`",
    "string": "write `type: categorical` with `choices: [...]`",
    "bool": "write `type: categorical` with `choices: [true, false]`",
    "boolean": "write `type: categorical` with `choices: [true, false]`",
    "const": "write the plain value, or `type: fixed` with `value: ...`",
    "constant": "write the plain value, or `type: fixed` with `value: ...`",
}


@dataclass
class _Draft:
    """One entry of ``params`` as read, before conditions are resolved."""

    name: str
    path: tuple
    kind: str  # float | int | categorical | fixed | invalid
    param: Any = None  # FloatParam / IntParam / CategoricalParam, or the fixed value
    when: Any = None  # the raw `when` mapping
    condition: Any = None  # Condition, None, or BAD


def read_params(value: Any, report: Report, *, present: bool, budget_key: str | None,
                rules: Mapping[str, Any] | None = None) -> Any:
    """Read ``params`` into ``(searched params, fixed values)``, or :data:`BAD`.

    Args:
        rules: Parameter name -> rule with ``issue(value)``: the values the trainable
            accepts for that key (see the module docstring).
    """
    rules = rules or {}
    path = ("params",)
    if value is None:
        what = "is missing" if not present else "is null"
        return report.add(path, "missing", f"required section {what}; add e.g. `params: "
                          "{lr: {type: float, low: 1.0e-4, high: 0.1, log: true}}`")
    mapping = report.mapping(value, path, example="{lr: {type: float, low: 1.0e-4, high: 0.1}}")
    if mapping is BAD:
        return BAD
    if not mapping:
        return report.add(path, "empty", "must define at least one parameter, e.g. "
                          "`lr: {type: float, low: 1.0e-4, high: 0.1, log: true}`")
    drafts: list[_Draft] = []
    for name, definition in mapping.items():
        param_path = path + (name,)
        name_ok = _check_name(name, param_path, report, budget_key)
        draft = _read_definition(name, definition, param_path, report, rules.get(name))
        if not name_ok:
            draft.kind = "invalid"
        drafts.append(draft)
    for index, draft in enumerate(drafts):
        if draft.when is not None:
            draft.condition = _read_condition(draft, drafts[:index], drafts[index + 1:], report,
                                              rules)
    if any(d.kind == "invalid" or d.condition is BAD for d in drafts):
        return BAD
    return _resolve_conditions(drafts)


def _check_name(name: Any, path: tuple, report: Report, budget_key: str | None) -> bool:
    if not isinstance(name, str) or not _NAME.match(name):
        hint = ""
        fixed_name = re.sub(r"\W", "_", name) if isinstance(name, str) else ""
        if _NAME.match(fixed_name):
            hint = f"; try `{fixed_name}`"
        report.add(path, "name", "a parameter name must be an identifier: letters, digits and "
                   f"`_`, not starting with a digit {got(name)}{hint}")
        return False
    if name == budget_key:
        attr = "epoch" if name == "epochs" else "step"
        report.add(path, "conflict", f"`{name}` is set for each trial from scheduler.max_t "
                   f"(time_attr: {attr}); remove it and set scheduler.max_t instead")
        return False
    if name in TRIAL_COLUMNS and name not in ("epochs", "steps"):  # budgets may be fixed
        report.add(path, "conflict", f"`{name}` is a column of the trial table "
                   "(docs/trial-tables.md); rename the parameter")
        return False
    return True


def _read_definition(name: Any, definition: Any, path: tuple, report: Report,
                     rule: Any) -> _Draft:
    draft = _Draft(name=name, path=path, kind="invalid")
    if definition is REJECTED:
        return draft
    if isinstance(definition, Mapping):
        return _read_searched(draft, definition, report, rule)
    if isinstance(definition, (list, tuple)):
        report.add(path, "type", "a list is ambiguous here: write `{type: categorical, choices: "
                   "[...]}` to search these values, or `{type: fixed, value: [...]}` to pass "
                   "the list to every trial")
        return draft
    if _check_fixed_value(definition, path, report, rule):
        draft.kind, draft.param = "fixed", definition
    return draft


def _check_rule(rule: Any, value: Any, path: tuple, report: Report, *, prefix: str = "") -> bool:
    """Whether ``value`` passes the trainable's rule for this key (if it has one)."""
    found = rule.issue(value) if rule is not None else None
    if found is None:
        return True
    kind, message = found
    report.add(path, kind, prefix + message)
    return False


def _check_fixed_value(value: Any, path: tuple, report: Report, rule: Any) -> bool:
    if not check_plain(value, path, report, what="a fixed value", containers=True,
                       hint="; quote it to pass it as a string", range_what=""):
        return False
    return _check_rule(rule, value, path, report)


def _read_searched(draft: _Draft, spec: Mapping, report: Report, rule: Any) -> _Draft:
    path = draft.path
    kind = spec.get("type")
    if kind is REJECTED:
        return draft
    if kind is None:
        report.reject_unknown_keys(spec, path, _ALL_KEYS)
        report.add(path + ("type",), "missing", f"required key is missing; {_guess_type(spec)}")
        return draft
    if kind not in _TYPES or not isinstance(kind, str):
        report.reject_unknown_keys(spec, path, _ALL_KEYS)
        hint = _TYPE_HINTS.get(str(kind).lower()) if isinstance(kind, str) else None
        close = suggest(kind, _TYPES)
        hint = hint or (f"did you mean `{close}`?" if close else None)
        report.add(path + ("type",), "choice" if isinstance(kind, str) else "type",
                   f"must be one of {', '.join(_TYPES)} {got(kind)}"
                   + (f"; {hint}" if hint else ""))
        return draft
    _reject_keys_of_other_types(spec, path, kind, report)
    if kind == "fixed":
        if "value" not in spec:
            report.add(path + ("value",), "missing", "required key is missing for a fixed "
                       "parameter")
        elif spec["value"] is not REJECTED and _check_fixed_value(spec["value"],
                                                                  path + ("value",), report, rule):
            draft.kind, draft.param = "fixed", spec["value"]
        return draft
    reader = {"float": read_float, "int": read_int, "categorical": read_categorical}[kind]
    param = reader(draft.name, spec, path, report)
    if param is not BAD and not _param_within_rule(param, path, report, rule):
        param = BAD
    if param is not BAD:
        draft.kind, draft.param, draft.when = kind, param, spec.get("when")
    return draft


def _param_within_rule(param: Any, path: tuple, report: Report, rule: Any) -> bool:
    """Every value the search can propose passes the rule: both ends of a range (the last
    value a step reaches), every choice."""
    if rule is None:
        return True
    if isinstance(param, CategoricalParam):
        return all([_check_rule(rule, c, path + ("choices", Index(i)), report)
                    for i, c in enumerate(param.choices)])
    high = param.high
    if param.step and not param.log:
        high = param.low + math.floor((param.high - param.low) / param.step + 1e-9) * param.step
        high = type(param.high)(high)
    low_ok = _check_rule(rule, param.low, path + ("low",), report)
    high_ok = _check_rule(rule, high, path + ("high",), report,
                          prefix="" if high == param.high else f"the largest value, {high}, ")
    return low_ok and high_ok


def _guess_type(spec: Mapping) -> str:
    if "choices" in spec:
        return "add `type: categorical`"
    if "value" in spec:
        return "add `type: fixed`"
    bounds = [spec.get("low"), spec.get("high")]
    if any(b is not None for b in bounds):
        if all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            return "add `type: int` (or `type: float`)"
        return "add `type: float`"
    return "one of float, int, categorical, fixed (a plain value needs no mapping)"


def _reject_keys_of_other_types(spec: Mapping, path: tuple, kind: str, report: Report) -> None:
    allowed = _KEYS[kind]
    for key in spec:
        if key in _ALL_KEYS and key not in allowed:
            owners = [t for t, keys in _KEYS.items() if key in keys]
            report.add(path + (key,), "unknown_key", f"`{key}` does not apply to a {kind} "
                       f"parameter (it belongs to {' / '.join(owners)}); valid keys: "
                       + ", ".join(allowed))
    report.reject_unknown_keys({k: v for k, v in spec.items() if k not in _ALL_KEYS},
                               path, allowed)

def _read_condition(draft: _Draft, earlier: list[_Draft], later: list[_Draft],
                    report: Report, rules: Mapping[str, Any]) -> Any:
    path = draft.path + ("when",)
    when = report.mapping(draft.when, path, example="{precision: fp16}")
    if when is BAD:
        return BAD
    if len(when) != 1:
        return report.add(path, "condition", "must name exactly one parameter, as in "
                          f"`when: {{precision: fp16}}` (got {len(when)})")
    (ref, values), = when.items()
    ref_path = path + (ref,)
    by_name = {d.name: d for d in earlier}
    if ref == draft.name:
        return report.add(ref_path, "condition", "a parameter cannot depend on itself")
    if ref not in by_name:
        if any(d.name == ref for d in later):
            return report.add(ref_path, "condition", f"refers to `{ref}`, which is defined "
                              f"after `{draft.name}`; move `{ref}` above it")
        close = suggest(ref, [d.name for d in earlier if isinstance(d.name, str)])
        hint = f"; did you mean `{close}`?" if close else ""
        return report.add(ref_path, "condition", f"refers to unknown parameter "
                          f"{show(ref)}{hint}")
    target = by_name[ref]
    if target.kind == "invalid":
        return BAD  # already reported
    if target.kind in ("float", "int"):
        return report.add(ref_path, "condition", f"`{ref}` is a {target.kind} parameter; a "
                          "condition can only test a categorical or fixed parameter")
    if values is REJECTED:
        return BAD
    listed = list(values) if isinstance(values, (list, tuple)) else [values]
    if not listed:
        return report.add(ref_path, "empty", "must list at least one value")
    valid = True
    for i, value in enumerate(listed):
        here = ref_path + (Index(i),) if isinstance(values, (list, tuple)) else ref_path
        if not is_scalar(value):
            report.add(here, "type", f"expected a value of `{ref}` {got(value)}")
            valid = False
        elif (target.kind == "categorical" and value not in target.param.choices
              and not _narrowed_by_override(target, value, report, rules.get(ref))):
            report.add(here, "condition", f"{show(value)} is not one of `{ref}`'s choices "
                       f"({', '.join(show(c) for c in target.param.choices)})")
            valid = False
        elif target.kind == "fixed" and not _check_rule(rules.get(ref), value, here, report):
            valid = False
    return Condition(param=ref, values=tuple(listed)) if valid else BAD


def _narrowed_by_override(target: _Draft, value: Any, report: Report, rule: Any) -> bool:
    """A ``--set`` that narrows the choices may leave a condition that can never hold;
    that is not a mistake in the file (the parameter is dropped), unless the value could
    never have been valid (the trainable's rule refuses it)."""
    if rule is not None and rule.issue(value) is not None:
        return False
    return report.is_overridden(target.path + ("choices",))


def _resolve_conditions(drafts: list[_Draft]) -> tuple[tuple, dict[str, Any]]:
    fixed: dict[str, Any] = {}
    searched: list[Any] = []
    dropped: set[str] = set()
    for draft in drafts:
        if draft.kind == "fixed":
            fixed[draft.name] = draft.param
            continue
        condition = draft.condition
        if condition is not None:
            target = next(d for d in drafts if d.name == condition.param)
            if condition.param in dropped or (
                target.kind == "categorical"
                and not any(v in target.param.choices for v in condition.values)
            ):
                dropped.add(draft.name)
                continue
            if condition.param in fixed:
                if not condition.holds(fixed):
                    dropped.add(draft.name)
                    continue
                condition = None
        searched.append(replace(draft.param, when=condition))
    return tuple(searched), fixed

