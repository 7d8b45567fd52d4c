"""Resolving the ``trainable`` named in a space file.

A trainable is either a built-in workload name (``digits``, ``charlm``) or a reference
``package.module:function`` to user code. :func:`check_trainable` tells ``hpsearch
validate`` whether a reference resolves, as a message rather than a traceback;
:func:`load_trainable` returns the object itself.

Built-in names are accepted without importing anything, so validating a space that uses
one loads neither torch nor Ray. User modules are imported with the current working
directory on ``sys.path``, as ``python -m`` does.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
import traceback
from typing import Any

from hpsearch.errors import TrainableError

__all__ = ["BUILTINS", "check_trainable", "load_trainable"]

#: Built-in workloads: name -> ``module:attribute`` of the workload object.
BUILTINS = {
    "digits": "hpsearch.workloads.digits:WORKLOAD",
    "charlm": "hpsearch.workloads.charlm:WORKLOAD",
}

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FORMS = "a built-in name (" + ", ".join(sorted(BUILTINS)) + ") or package.module:function"


def check_trainable(ref: object) -> str | None:
    """Say what is wrong with a trainable reference, or return ``None`` if it resolves.

    Built-in names are accepted without importing anything. For ``module:attr`` the module
    is imported (any exception it raises, ``SyntaxError`` included, becomes the message)
    and the attribute must be callable or an object with a ``build_model`` method.

    Args:
        ref: The ``trainable`` value from a space file.

    Returns:
        ``None`` if ``ref`` resolves, else one line stating the problem.
    """
    problem = _check_reference_syntax(ref)
    if problem is not None or ref in BUILTINS:
        return problem
    try:
        _resolve(str(ref))
    except TrainableError as exc:
        return str(exc)
    return None


def load_trainable(ref: str) -> Any:
    """Import and return the object ``ref`` names.

    Args:
        ref: A built-in name or ``package.module:function``.

    Returns:
        The workload object or training function.

    Raises:
        TrainableError: ``ref`` is malformed, its module cannot be imported, or the
            attribute is missing or not usable as a trainable.
    """
    problem = _check_reference_syntax(ref)
    if problem is not None:
        raise TrainableError(problem)
    return _resolve(BUILTINS.get(ref, ref))


def _check_reference_syntax(ref: object) -> str | None:
    if not isinstance(ref, str):
        return f"expected {_FORMS} (got {ref!r})"
    if ref in BUILTINS:
        return None
    if ":" not in ref:
        close = difflib.get_close_matches(ref, list(BUILTINS), n=1)
        hint = f"; did you mean `{close[0]}`?" if close else f"; expected {_FORMS}"
        if not close and _DOTTED.match(ref) and "." in ref:
            hint = f"; name the function too, as in `{ref}:train`"
        return f"`{ref}` is not a built-in trainable{hint}"
    module, _, attr = ref.partition(":")
    if module.endswith(".py") or "/" in module or "\\" in module:
        guess = os.path.splitext(module.replace("\\", "/"))[0].strip("./").replace("/", ".")
        return (f"`{module}` is a file path; name the module instead, "
                f"as in `{guess}:{attr or 'train'}`")
    if not module or not attr:
        part = "module before" if not module else "function after"
        return f"the {part} `:` is missing (expected package.module:function, got `{ref}`)"
    if not _DOTTED.match(module):
        return f"`{module}` is not a module name (expected package.module:function, got `{ref}`)"
    if not _DOTTED.match(attr):
        return f"`{attr}` is not an attribute name (expected package.module:function, got `{ref}`)"
    return None


def _resolve(ref: str) -> Any:
    module_name, _, attr = ref.partition(":")
    module = _import_user_module(module_name)
    obj: Any = module
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            owner = module_name if i == 0 else f"{module_name}:{'.'.join(attr.split('.')[:i])}"
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise TrainableError(f"`{owner}` has no attribute `{part}`{hint}")
        obj = getattr(obj, part)
    if not (callable(obj) or callable(getattr(obj, "build_model", None))):
        raise TrainableError(
            f"`{ref}` is a {type(obj).__name__}, not a training function or a workload "
            "object with a `build_model` method"
        )
    return obj


def _import_user_module(name: str) -> Any:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as exc:
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        where = ""
        if isinstance(exc, SyntaxError) and exc.filename:
            where = f" (in {exc.filename}, line {exc.lineno})"
        elif isinstance(exc, SystemExit):
            last = f"SystemExit: the module called sys.exit({exc.code!r}) while being imported"
        raise TrainableError(f"cannot import module `{name}`: {last}{where}") from exc
