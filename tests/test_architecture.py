"""The package's shape, checked: each room keeps to its job and its imports.

These are the rules the README's development table states; a change that breaks one
should move code to the right room rather than change the rule.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "hpsearch"
MODULES = sorted(PACKAGE.rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def source(path: Path) -> str:
    return path.read_text()


@pytest.mark.parametrize("package", ["hpsearch.store", "hpsearch.space", "hpsearch.workloads.resolve",
                                     "hpsearch.train.keys"])
def test_light_packages_import_neither_ray_nor_torch_nor_optuna(package):
    modules = [package] + [
        f"{package}.{p.stem}" for p in (PACKAGE.parent / package.replace(".", "/")).glob("*.py")
        if p.stem != "__init__"
    ] if (PACKAGE.parent / package.replace(".", "/")).is_dir() else [package]
    code = ("import sys, importlib\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'torch', 'optuna'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_private_ray_access_lives_in_one_module():
    pattern = re.compile(r"_local_tuner|_brackets|ray\._private")
    found = {rel(p) for p in MODULES if pattern.search(source(p))}
    assert found == {"hpsearch/driver/repairs.py"}


@pytest.mark.parametrize("name", ["trials.parquet", "history.parquet", "manifest.json",
                                  "optuna.db", "optuna.journal", "space.yaml", "report.html", "report.md"])
def test_sweep_file_names_are_spelled_in_one_module(name):
    found = {rel(p) for p in MODULES if f'"{name}"' in source(p) or f"'{name}'" in source(p)}
    assert found == {"hpsearch/store/layout.py"}


def _imports(path: Path):
    tree = ast.parse(source(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hpsearch"):
            for alias in node.names:
                yield node.module, alias.name


def _package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def test_no_module_imports_a_private_name_from_another_package():
    offences = []
    for path in MODULES:
        own = _package_of(rel(path)[:-3].replace("/", "."))
        for module, name in _imports(path):
            dunder = name.startswith("__") and name.endswith("__")
            private = (name.startswith("_") and not dunder) or any(
                p.startswith("_") for p in module.split("."))
            if private and _package_of(module) != own:
                offences.append(f"{rel(path)}: from {module} import {name}")
    assert not offences, offences


def test_every_deletion_goes_through_the_fence():
    """rmtree/unlink/remove appear only in the fence, hpsearch.store.layout.remove_inside."""
    deleting = re.compile(r"\brmtree\(|\.unlink\(|os\.remove\(|os\.rmdir\(|\.rmdir\(")
    found = {rel(p) for p in MODULES if deleting.search(source(p))}
    assert found == {"hpsearch/store/layout.py"}


def test_store_and_space_never_import_the_driver():
    for path in MODULES:
        if rel(path).startswith(("hpsearch/store/", "hpsearch/space/", "hpsearch/train/",
                                 "hpsearch/workloads/", "hpsearch/report/")):
            for module, _ in _imports(path):
                assert not module.startswith(("hpsearch.driver", "hpsearch.cli")), \
                    f"{rel(path)} imports {module}"
