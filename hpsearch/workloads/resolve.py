"""Trainable references: a built-in workload name, or ``package.module:attribute``.

Two ways to look at a reference, for two moments:

* :func:`find_trainable` (``hpsearch validate``, and every command before it starts
  work) **never executes user code**. It locates the module's file through Python's import
  finders without importing it or its parent packages, reads the file with :mod:`ast`,
  and looks for the attribute as a top-level ``def``, ``class``, assignment or import. It
  also tells, when the source says so, whether the attribute is a harness
  :class:`~hpsearch.train.Workload` or a raw Ray Train loop function.
* :func:`load_trainable` (``run`` and ``trial`` only) imports the module and returns the
  object. User modules are imported with the current working directory on ``sys.path``,
  as ``python -m`` does.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.machinery
import os
import re
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Literal

from hpsearch.errors import TrainableError

__all__ = ["BUILTINS", "TrainableRef", "check_reference", "check_trainable", "find_trainable",
           "is_harness_workload", "load_trainable"]

#: Built-in workloads: name -> ``module:attribute`` of the workload object.
BUILTINS = {
    "digits": "hpsearch.workloads.digits:WORKLOAD",
    "charlm": "hpsearch.workloads.charlm:WORKLOAD",
}

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FORMS = "a built-in name (" + ", ".join(sorted(BUILTINS)) + ") or package.module:function"

Kind = Literal["harness", "raw", "unknown"]


@dataclass(frozen=True)
class TrainableRef:
    """Where a trainable is and what it is, found without running it.

    Attributes:
        ref: The reference as written in the space.
        kind: ``harness`` (a ``Workload``: hpsearch's loop trains it), ``raw`` (a
            ``train_loop_per_worker`` function for Ray Train) or ``unknown`` (the source
            does not say; decided when ``run`` imports it).
        file: The module's source file, if it has one.
    """

    ref: str
    kind: Kind
    file: str | None = None


def find_trainable(ref: object) -> TrainableRef:
    """Locate ``ref`` and tell its kind, without executing any user code.

    Raises:
        TrainableError: ``ref`` is malformed, its module cannot be found, or the module's
            source does not define the attribute.
    """
    ref = check_reference(ref)
    if ref in BUILTINS:
        return TrainableRef(ref, "harness")
    module_name, _, attr = ref.partition(":")
    origin = _find_module_file(module_name)
    if origin is None or not origin.endswith(".py"):
        return TrainableRef(ref, "unknown", origin)  # compiled or namespace: can't read it
    try:
        with open(origin, "rb") as f:
            tree = ast.parse(f.read(), filename=origin)
    except SyntaxError as exc:
        raise TrainableError(f"cannot read module `{module_name}`: SyntaxError: {exc.msg} "
                             f"(in {exc.filename}, line {exc.lineno})") from None
    except (OSError, ValueError) as exc:
        raise TrainableError(f"cannot read module `{module_name}` ({origin}): {exc}") from None
    return TrainableRef(ref, _kind_in_source(tree, module_name, attr), origin)


def check_reference(ref: object) -> str:
    """``ref`` if it is well-formed (a built-in name or ``package.module:attribute``),
    looked at as text only; else raise :class:`TrainableError`."""
    problem = _check_reference_syntax(ref)
    if problem is not None:
        raise TrainableError(problem)
    return ref  # type: ignore[return-value]


def check_trainable(ref: object) -> str | None:
    """What is wrong with ``ref`` as one line, or ``None``; executes no user code."""
    try:
        find_trainable(ref)
    except TrainableError as exc:
        return str(exc)
    return None


def load_trainable(ref: str) -> Any:
    """Import and return the object ``ref`` names (``run`` and ``trial`` only).

    Raises:
        TrainableError: ``ref`` is malformed, its module cannot be imported, or the
            attribute is missing or not usable as a trainable.
    """
    return _resolve(BUILTINS.get(check_reference(ref), ref))


def is_harness_workload(obj: object) -> bool:
    """Harness mode (a ``Workload``) rather than a raw Ray Train loop function."""
    return hasattr(obj, "build_model") and hasattr(obj, "build_data")


# --- static ------------------------------------------------------------------------------


def _search_path() -> list[str]:
    cwd = os.getcwd()
    path = list(sys.path)
    if cwd not in path and "" not in path:
        path.insert(0, cwd)
    return [cwd if p == "" else p for p in path]


def _find_spec_no_import(fullname: str, path: list[str] | None):
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(fullname, path, None)
        except (ImportError, ValueError, TypeError):
            continue
        if spec is not None:
            return spec
    return None


def _find_module_file(module_name: str) -> str | None:
    """The module's file, found part by part like ``import`` would but running nothing:
    each parent package is located, never imported."""
    if module_name in sys.modules:  # already imported (e.g. by the test session)
        return getattr(sys.modules[module_name], "__file__", None)
    parts = module_name.split(".")
    path: list[str] | None = _search_path()
    spec = None
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        if i == 0:  # the working directory first, as `import` will see it; then finders
            spec = (importlib.machinery.PathFinder.find_spec(name, path)
                    or _find_spec_no_import(name, None))
        else:
            spec = _find_spec_no_import(name, path)
        if spec is None:
            missing = name if i == 0 else f"{name}` (in package `{'.'.join(parts[:i])}`"
            raise TrainableError(
                f"cannot find module `{missing}`: no such module on the import path (the "
                "working directory and installed packages). Run from the directory that "
                "holds it, or install its package"
            )
        if i < len(parts) - 1:
            locations = spec.submodule_search_locations
            if locations is None:
                raise TrainableError(f"cannot find module `{module_name}`: `{name}` is a "
                                     "module, not a package")
            path = list(locations)
    origin = getattr(spec, "origin", None)
    return origin if origin not in (None, "namespace", "built-in", "frozen") else None


def _kind_in_source(tree: ast.Module, module_name: str, attr: str) -> Kind:
    first = attr.split(".")[0]
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        for name, value in _bindings(node):
            found[name] = value
    if first not in found:
        if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
               for n in tree.body):
            return "unknown"  # `from x import *` may bring it
        names = [n for n in found if not n.startswith("_")]
        close = difflib.get_close_matches(first, names, n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        raise TrainableError(f"`{module_name}` has no attribute `{first}`{hint}")
    if "." in attr:
        return "unknown"
    value = found[first]
    if isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return "raw"
    if isinstance(value, ast.ClassDef):
        methods = {n.name for n in value.body if isinstance(n, (ast.FunctionDef,))}
        return "harness" if {"build_model", "build_data"} <= methods else "unknown"
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return "harness" if name == "Workload" else "unknown"
    if isinstance(value, ast.Constant):
        raise TrainableError(
            f"`{module_name}:{attr}` is a {type(value.value).__name__}, not a training "
            "function or a workload object with a `build_model` method"
        )
    if isinstance(value, ast.Lambda):
        return "raw"
    return "unknown"


def _bindings(node: ast.stmt):
    """``(name, value node)`` for each top-level name a statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name, node
    elif isinstance(node, ast.Assign):
        for target in node.targets:
            for name in _target_names(target):
                yield name, node.value
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        yield node.target.id, node.value or node
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            if alias.name != "*":
                yield (alias.asname or alias.name).split(".")[0], node
    elif isinstance(node, (ast.If, ast.Try, ast.With)):
        bodies = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
        bodies += [h.body for h in getattr(node, "handlers", [])]
        for body in bodies:
            for child in body:
                yield from _bindings(child)


def _target_names(target: ast.expr):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)


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


# --- importing ---------------------------------------------------------------------------


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
