"""Trainable references: found without running user code (validate), imported by run."""

from __future__ import annotations

import sys

import pytest

from hpsearch.errors import TrainableError
from hpsearch.workloads.resolve import BUILTINS, check_trainable, find_trainable, load_trainable


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
        assert find_trainable(name).kind == "harness"


def test_module_function_in_the_working_directory_resolves(user_dir):
    (user_dir / "my_train.py").write_text("def main(config):\n    return config\n")
    assert check_trainable("my_train:main") is None
    assert find_trainable("my_train:main").kind == "raw"
    assert load_trainable("my_train:main")({"a": 1}) == {"a": 1}


def test_workload_object_with_build_model_is_accepted(user_dir):
    (user_dir / "wl.py").write_text(
        "class W:\n    def build_model(self, config):\n        return None\nWORKLOAD = W()\n"
    )
    assert check_trainable("wl:WORKLOAD") is None


def test_a_workload_call_is_seen_as_harness_in_the_source(user_dir):
    (user_dir / "mine.py").write_text(
        "from hpsearch.train import Workload\nWORKLOAD = Workload(build_model=f, build_data=g)\n"
    )
    assert find_trainable("mine:WORKLOAD").kind == "harness"


SIDE_EFFECTS = [
    "open({marker!r}, 'w').write('imported')\ndef main(config): pass\n",
    "import os\nos._exit(0)\ndef main(config): pass\n",
    "while True:\n    pass\ndef main(config): pass\n",
]


@pytest.mark.parametrize("source", SIDE_EFFECTS, ids=["writes", "exits", "loops"])
def test_validation_never_executes_the_module_or_its_package(user_dir, source):
    marker = user_dir / "marker"
    pkg = user_dir / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(source.format(marker=str(marker)))
    (pkg / "train.py").write_text(source.format(marker=str(marker)))
    assert check_trainable("pkg.train:main") is None
    assert check_trainable("pkg:main") is None
    assert not marker.exists()
    assert "pkg" not in sys.modules and "pkg.train" not in sys.modules


@pytest.mark.parametrize(
    ("source", "ref", "static", "imported"),
    [
        (None, "nope_pkg.mod:main", ["cannot find module `nope_pkg`"],
         ["`nope_pkg.mod`", "ModuleNotFoundError: No module named 'nope_pkg'"]),
        ("def main(:\n", "broken_syntax:main", ["`broken_syntax`", "SyntaxError", "line 1"],
         ["`broken_syntax`", "SyntaxError", "line 1"]),
        ("raise RuntimeError('no GPU here')\ndef main(config): pass\n", "raises_on_import:main",
         None, ["`raises_on_import`", "RuntimeError: no GPU here"]),
        ("import sys\nsys.exit(3)\ndef main(config): pass\n", "exits_on_import:main", None,
         ["`exits_on_import`", "sys.exit(3)"]),
        ("def train(config): pass\n", "has_train:trian",
         ["no attribute `trian`", "did you mean `train`"],
         ["no attribute `trian`", "did you mean `train`"]),
        ("LR = 0.1\n", "has_constant:LR", ["is a float", "build_model"],
         ["is a float", "build_model"]),
    ],
)
def test_unresolvable_trainable_is_a_message_not_a_traceback(user_dir, source, ref, static,
                                                             imported):
    if source is not None:
        (user_dir / f"{ref.split(':')[0]}.py").write_text(source)
    message = check_trainable(ref)
    if static is None:  # only importing shows it: validate passes, run refuses
        assert message is None
    else:
        assert message is not None
        for fragment in static:
            assert fragment in message
    with pytest.raises(TrainableError) as err:
        load_trainable(ref)
    for fragment in imported:
        assert fragment in str(err.value)


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
