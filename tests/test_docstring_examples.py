"""The examples in the package's docstrings run and print what they say they print.

Docstrings are where a reader of the public API meets it first (Optuna's style: a runnable
example under each function worth one), so an example that no longer runs is a bug. Every
module of ``hpsearch`` with a ``>>>`` example is run with :mod:`doctest`.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "hpsearch"
WITH_EXAMPLES = sorted(
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for path in PACKAGE.rglob("*.py") if ">>> " in path.read_text(encoding="utf-8"))


def test_the_package_has_examples_to_run():
    assert "hpsearch.driver.record.study" in WITH_EXAMPLES and len(WITH_EXAMPLES) >= 10


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_run_as_written(name):
    module = importlib.import_module(name.removesuffix(".__init__"))
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             report=False, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed; " \
                               f"run: python -m doctest -v {name.replace('.', '/')}.py"
