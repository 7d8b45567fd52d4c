"""Resolving ``trainable``: built-ins without imports, user modules from the working dir."""

from __future__ import annotations

import sys

import pytest

from hpsearch.errors import TrainableError
from hpsearch.trainables import BUILTINS, check_trainable, load_trainable


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A working directory holding user modules; they are forgotten afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        sys.modules.pop(name, None)


def test_builtin_names_are_accepted_without_importing_them():
    for name in BUILTINS:
        assert check_trainable(name) is None


def test_module_function_in_the_working_directory_resolves(user_dir):
    (user_dir / "my_train.py").write_text("def main(config):\n    return config\n")
    assert check_trainable("my_train:main") is None
    assert load_trainable("my_train:main")({"a": 1}) == {"a": 1}


def test_workload_object_with_build_model_is_accepted(user_dir):
    (user_dir / "wl.py").write_text(
        "class W:\n    def build_model(self, config):\n        return None\nWORKLOAD = W()\n"
    )
    assert check_trainable("wl:WORKLOAD") is None


@pytest.mark.parametrize(
    ("source", "ref", "fragments"),
    [
        (None, "nope_pkg.mod:main", ["`nope_pkg.mod`", "ModuleNotFoundError: No module named 'nope_pkg'"]),
        ("def main(:\n", "broken_syntax:main", ["`broken_syntax`", "SyntaxError", "line 1"]),
        ("raise RuntimeError('no GPU here')\n", "raises_on_import:main",
         ["`raises_on_import`", "RuntimeError: no GPU here"]),
        ("import sys\nsys.exit(3)\n", "exits_on_import:main", ["`exits_on_import`", "sys.exit(3)"]),
        ("def train(config): pass\n", "has_train:trian", ["no attribute `trian`", "did you mean `train`"]),
        ("LR = 0.1\n", "has_constant:LR", ["is a float", "build_model"]),
    ],
)
def test_unresolvable_trainable_is_a_message_not_a_traceback(user_dir, source, ref, fragments):
    if source is not None:
        (user_dir / f"{ref.split(':')[0]}.py").write_text(source)
    message = check_trainable(ref)
    assert message is not None
    for fragment in fragments:
        assert fragment in message
    with pytest.raises(TrainableError):
        load_trainable(ref)


@pytest.mark.parametrize(
    ("ref", "fragment"),
    [
        ("charml", "did you mean `charlm`"),
        ("train.py:main", "name the module instead"),
        ("mypkg.train", "name the function too"),
        ("a-b:main", "not a module name"),
        ("mod:1abc", "not an attribute name"),
        (":main", "module before `:` is missing"),
        ("mod:", "function after `:` is missing"),
        (42, "got 42"),
    ],
)
def test_malformed_reference_is_explained(ref, fragment):
    assert fragment in check_trainable(ref)
