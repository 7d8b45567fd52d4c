"""A command's placeholders: ``{lr}`` is a parameter's value, ``{trial_dir}`` a built-in.

The same parser serves ``hpsearch validate`` (which names each placeholder must refer to)
and the runner (the words of one trial's command), so the two can never disagree.
``{{`` and ``}}`` are literal braces; a format spec is allowed (``{lr:.2e}``).
"""

from __future__ import annotations

import shlex
import string
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["BUILTINS", "RESUME_FROM", "names_in", "render", "split_command"]

#: Placeholders every trial has, besides its parameters (a parameter of the same name
#: wins for ``seed``; the others cannot be parameter names).
BUILTINS = ("trial_dir", "max_t", "trial_id", "seed")
#: The newest match of ``resume.if_exists`` (``{trial_dir}/checkpoint-120``), for
#: ``resume.args`` only.
RESUME_FROM = "resume_from"

_FORMATTER = string.Formatter()


def split_command(value: str | Sequence[str]) -> list[str]:
    """The command's words: a string is split as a shell would (never run by one).

    Raises:
        ValueError: The string's quotes do not close.
    """
    if isinstance(value, str):
        return shlex.split(value)
    return [str(word) for word in value]


def names_in(word: str) -> list[str]:
    """The placeholder names in one word, in order.

    Raises:
        ValueError: A brace is unmatched, or a placeholder is not a plain name
            (``{a.b}``, ``{a[0]}``, ``{}``).

    Example:
        >>> names_in("--lr={lr:.3g}"), names_in("{{literal}}")
        (['lr'], [])
    """
    names = []
    try:
        parts = list(_FORMATTER.parse(word))
    except ValueError:
        raise ValueError(f"`{word}` has an unmatched brace: write `{{name}}` for a "
                         "placeholder, `{{` or `}}` for a literal brace") from None
    for _, field, spec, _ in parts:
        if field is None:
            continue
        if not field.isidentifier():
            shown = "{" + field + "}"
            raise ValueError(f"`{shown}` is not a placeholder: write `{{name}}` with a "
                             "parameter's name, or `{{`/`}}` for a literal brace")
        names.append(field)
        if spec:
            names += names_in(spec)
    return names


def render(argv: Iterable[str], values: Mapping[str, Any], *,
           optional: Iterable[str] = ()) -> list[str]:
    """The words of the command with every placeholder replaced by its value.

    Booleans are written ``true``/``false`` unless a format spec says otherwise. A word
    with a placeholder of an ``optional`` name (a conditional parameter) that has no value
    is left out: ``--loss_scale={loss_scale_init}`` is there only in the trials that
    sample ``loss_scale_init``.

    >>> render(["--lr={lr}", "--scale={scale}"], {"lr": 0.5}, optional=["scale"])
    ['--lr=0.5']

    Raises:
        KeyError: A placeholder has no value (validation prevents this).
    """
    shown = {k: _word(v) for k, v in values.items()}
    missing = {name for name in optional if name not in values}
    return [_FORMATTER.vformat(word, (), shown) for word in argv
            if not missing.intersection(names_in(word))]


def _word(value: Any) -> Any:
    if isinstance(value, bool):
        return _Shown("true" if value else "false", value)
    if isinstance(value, float):
        return _Shown(repr(value), value)
    return value


class _Shown:
    """A value that prints as ``text`` and formats as ``value`` under a format spec."""

    def __init__(self, text: str, value: Any):
        self.text, self.value = text, value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec) if spec else self.text
