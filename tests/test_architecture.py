"""The package's shape, checked: each room keeps to its job and its imports.

The rooms and the arrows between them are the table below; a change that breaks a rule
should move code to the right room rather than change the rule. Every import counts,
function-local ones included.
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

#: Rooms, top to bottom: every arrow points down this list.
LAYERS = ["cli", "driver.sweep", "driver.monitor", "driver.trials", "driver.limits",
          "driver.search", "driver.record", "driver.cluster", "driver.internals", "report",
          "track", "store", "space",
          "command", "workloads", "train", "fence", "errors"]

#: The rooms each room may import (besides itself and the lazy top-level package).
ALLOWED = {
    "cli": {"driver.sweep", "driver.trials", "driver.limits", "driver.cluster", "report",
            "track", "store", "space", "errors"},
    "driver.sweep": {"driver.monitor", "driver.trials", "driver.limits", "driver.search",
                     "driver.record", "driver.cluster", "driver.internals", "report", "track",
                     "store", "space", "errors"},
    "driver.monitor": {"driver.search", "driver.record", "driver.internals", "store", "space",
                       "errors"},
    "driver.trials": {"driver.search", "driver.cluster", "driver.internals", "store", "space",
                      "command", "workloads", "train", "errors"},
    "driver.limits": {"driver.search", "driver.record", "driver.cluster", "space", "command",
                      "errors"},
    "driver.search": {"driver.record", "driver.internals", "store", "space", "errors"},
    "driver.record": {"driver.internals", "store", "space", "errors"},
    "driver.cluster": {"driver.internals", "store", "space", "fence", "errors"},
    "driver.internals": {"store", "errors"},
    "report": {"store", "space", "errors"},
    "track": {"store", "space", "errors"},
    "store": {"space", "fence", "errors"},
    "space": {"command", "workloads", "train", "errors"},
    "command": {"errors"},
    "workloads": {"train", "errors"},
    "train": {"fence", "errors"},
    "fence": {"errors"},
    "errors": set(),
}

#: The one module that may touch Ray's and Optuna's private attributes and modules.
GUARDED = "hpsearch/driver/internals.py"


def rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def module_of(path: Path) -> str:
    name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def room_of(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts or parts == ["__main__"]:
        return "hpsearch"
    if parts[0] == "driver" and len(parts) > 1:
        return f"driver.{parts[1]}"
    return parts[0]


def imported(path: Path):
    """Every hpsearch module ``path`` imports, anywhere in it."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hpsearch"):
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hpsearch"):
                    yield alias.name, None


def test_the_table_of_arrows_points_down_the_layers():
    assert set(ALLOWED) == set(LAYERS)
    for room, allowed in ALLOWED.items():
        below = set(LAYERS[LAYERS.index(room) + 1:])
        assert allowed <= below, f"{room} may import {sorted(allowed - below)}, above it"


def test_every_import_follows_the_table():
    offences = []
    for path in MODULES:
        room = room_of(module_of(path))
        if room == "hpsearch":  # the lazy public API and ``python -m hpsearch``: the top
            continue
        for module, _ in imported(path):
            target = room_of(module)
            if target not in (room, "hpsearch") and target not in ALLOWED.get(room, set()):
                offences.append(f"{rel(path)} ({room}) imports {module} ({target})")
    assert not offences, "\n".join(offences)


def test_no_import_cycle_between_modules():
    modules = {module_of(p): p for p in MODULES}

    def resolve(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {m: set() for m in modules}
    for name, path in modules.items():
        for module, alias in imported(path):
            full = f"{module}.{alias}" if alias else module
            target = resolve(full if full in modules else module)
            if target != name:
                graph[name].add(target)
    visiting, done = [], set()

    def visit(node: str) -> None:
        if node in done:
            return
        if node in visiting:
            raise AssertionError("import cycle: " + " -> ".join(
                visiting[visiting.index(node):] + [node]))
        visiting.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


_PRIVATE_PATH = re.compile(r"\b(?:ray|optuna)(?:\.\w+)*\._[a-z]\w*")


def test_private_ray_and_optuna_access_lives_in_one_guarded_module():
    """No ``x._name`` on anything but the object's own class (``self``, ``cls``), no import
    of a private Ray or Optuna module, and no dotted path to one in a string, outside
    :data:`GUARDED`."""
    offences = []
    for path in MODULES:
        if rel(path) == GUARDED:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.endswith("__"):
                owner = node.value.id if isinstance(node.value, ast.Name) else None
                if owner not in ("self", "cls"):
                    offences.append(f"{rel(path)}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module and \
                    _PRIVATE_PATH.search(node.module + "."):
                offences.append(f"{rel(path)}:{node.lineno}: from {node.module}")
            if isinstance(node, ast.Import):
                offences += [f"{rel(path)}:{node.lineno}: import {a.name}" for a in node.names
                             if _PRIVATE_PATH.search(a.name)]
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    _PRIVATE_PATH.search(node.value):
                offences.append(f"{rel(path)}:{node.lineno}: {node.value!r}")
    assert not offences, "\n".join(offences)


def test_the_guarded_module_checks_the_versions_it_was_written_for():
    from hpsearch.driver import internals

    assert internals.version_note("ray", "2.60.0") is None
    assert "tested with Ray" in internals.version_note("ray", "3.1.0")
    source = (PACKAGE / "driver" / "internals.py").read_text()
    # every private attribute is reached through internal(), which names the versions
    assert source.count("internal(") >= 6


@pytest.mark.parametrize("package", ["hpsearch.store", "hpsearch.space", "hpsearch.workloads.resolve",
                                     "hpsearch.train.keys", "hpsearch.driver.search.rungs",
                                     "hpsearch.driver.limits.plan"])
def test_light_packages_import_neither_ray_nor_torch_nor_optuna(package):
    folder = PACKAGE.parent / package.replace(".", "/")
    modules = [package] + ([f"{package}.{p.stem}" for p in folder.glob("*.py")
                            if p.stem != "__init__"] if folder.is_dir() else [])
    code = ("import sys, importlib\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'torch', 'optuna'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("name", ["trials.parquet", "history.parquet", "manifest.json",
                                  "optuna.db", "optuna.journal", "space.yaml", "report.html", "report.md"])
def test_sweep_file_names_are_spelled_in_one_module(name):
    found = {rel(p) for p in MODULES if f'"{name}"' in p.read_text() or f"'{name}'" in p.read_text()}
    assert found == {"hpsearch/store/layout.py"}


def test_no_module_imports_a_private_name_from_another_package():
    offences = []
    for path in MODULES:
        own = room_of(module_of(path))
        for module, name in imported(path):
            name = name or ""
            dunder = name.startswith("__") and name.endswith("__")
            private = (name.startswith("_") and not dunder) or any(
                p.startswith("_") for p in module.split("."))
            if private and room_of(module) != own:
                offences.append(f"{rel(path)}: from {module} import {name}")
    assert not offences, offences


def test_every_deletion_goes_through_the_fence():
    """rmtree/unlink/remove appear only in the fence, :func:`hpsearch.fence.remove_inside`."""
    deleting = re.compile(r"\brmtree\(|\.unlink\(|os\.remove\(|os\.rmdir\(|\.rmdir\(")
    found = {rel(p) for p in MODULES if deleting.search(p.read_text())}
    assert found == {"hpsearch/fence.py"}


@pytest.mark.parametrize("limit, what", [(12, "modules in a folder"), (450, "lines in a module"),
                                         (80, "lines in a function")])
def test_rooms_stay_small(limit, what):
    offences = []
    if what == "modules in a folder":
        for folder in {p.parent for p in MODULES}:
            count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
            if count > limit:
                offences.append(f"{rel(folder)}: {count}")
    elif what == "lines in a module":
        offences = [f"{rel(p)}: {n}" for p in MODULES
                    if (n := len(p.read_text().splitlines())) > limit]
    else:
        for path in MODULES:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > limit:
                        offences.append(f"{rel(path)}:{node.lineno} {node.name}: {n}")
    assert not offences, f"more than {limit} {what}:\n" + "\n".join(sorted(offences))


#: What changes a trial row of :class:`hpsearch.store.records.TrialRecords`.
ROW_VERBS = {"start", "result", "end", "end_as_recorded", "recover_reports", "annotate",
             "add_without_reports", "link_optuna", "stopped_by_scheduler", "touch", "load"}


def test_one_module_of_the_driver_changes_the_trial_rows():
    """In the driver, only the sweep's record (``SweepRecord``) calls a row-changing verb
    on its rows, or assigns into a row: the searcher, ASHA and the tables callback forward
    to it. (The store's own helpers it calls, retention among them, change rows too.)"""
    def receiver(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        return node.attr if isinstance(node, ast.Attribute) else None

    found = set()
    for path in MODULES:
        if not rel(path).startswith("hpsearch/driver/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ROW_VERBS
                    and receiver(node.func.value) in ("rows", "records")):
                found.add(rel(path))
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Subscript) and \
                    receiver(node.value.value) == "trials":
                found.add(rel(path))  # rows.trials[tid][key] = ...
    assert found == {"hpsearch/driver/record/sweep_record.py"}, sorted(found)


#: What writes a sweep's manifest or space: :mod:`hpsearch.store.manifest`'s writers, and
#: :mod:`hpsearch.store.sweeps`' whole operations (called as ``sweeps.<name>``).
MANIFEST_WRITERS = {"write_manifest", "record_driver"}
SWEEPS_WRITERS = {"create", "begin_run", "end_run", "write_space"}


def test_only_the_record_writes_a_sweeps_manifest_in_the_driver():
    """A run's manifest is the record's (``SweepRecord``): warm start hands it what it
    imported, the GPU simulation's note goes through ``begin``; no other driver module
    writes the manifest or the space."""
    found = set()
    for path in MODULES:
        if not rel(path).startswith("hpsearch/driver/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in MANIFEST_WRITERS or (
                    isinstance(f, ast.Attribute) and f.attr in SWEEPS_WRITERS
                    and isinstance(f.value, ast.Name) and f.value.id == "sweeps"):
                found.add(rel(path))
    assert found == {"hpsearch/driver/record/sweep_record.py"}, sorted(found)


def test_only_the_record_opens_a_sweeps_study_to_write():
    """``open_study`` (which creates the study when it is missing) is called by the
    record's room alone: a second opener made a sweep of several objectives a study of one
    direction (warm start). Readers use ``load_sweep_study``."""
    found = set()
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id == "open_study":
                found.add(rel(path))
    assert found <= {"hpsearch/driver/record/sweep_record.py",
                     "hpsearch/driver/record/study.py"}, sorted(found)


#: Where no module-level mutable state may live: what lives as long as a sweep belongs to
#: the sweep's objects, what lives as long as a process to one named object (a class
#: instance, a cached function), never to a bare module global.
STATELESS_ROOMS = ("hpsearch/store/", "hpsearch/driver/")

#: Module globals still holding state, each to be removed by the change named beside it.
KNOWN_STATE: frozenset[str] = frozenset()

#: Calls that build a mutable container (by their last dotted name).
_MUTABLE_FACTORIES = frozenset({
    "dict", "list", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "deque",
    "ChainMap", "WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "Queue", "SimpleQueue",
    "LifoQueue", "PriorityQueue"})
_MUTABLE_LITERALS = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)


def _is_mutable(value: ast.expr | None) -> bool:
    if isinstance(value, _MUTABLE_LITERALS):
        return True
    if isinstance(value, ast.BinOp):  # [..] + [..], {..} | {..}: a container again
        return _is_mutable(value.left) or _is_mutable(value.right)
    if isinstance(value, ast.Call):
        callee = value.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        return name in _MUTABLE_FACTORIES
    return False


def _top_level(body: list[ast.stmt]):
    """The statements run at import (module or class body), into if/try/with blocks, not
    into functions."""
    for node in body:
        yield node
        if isinstance(node, ast.ClassDef):
            yield from _top_level(node.body)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from _top_level([n for n in getattr(node, field, []) or []
                                       if isinstance(n, (ast.stmt, ast.excepthandler))])


def module_state(source: str, where: str) -> list[str]:
    """Each place in ``source`` (the module ``where``) that keeps state at module or class
    level, as ``where:name``.

    The rule: at import time no name is bound to a mutable container (a list, dict or set
    literal or comprehension, or a call of :data:`_MUTABLE_FACTORIES`), and nothing is
    changed in place (``X += ...``, ``X[k] = ...``, ``X.attr = ...``); no function says
    ``global``. ``__all__`` may be a list of strings. Read-only tables are tuples,
    frozensets or ``types.MappingProxyType`` of a dict; regexes, loggers, numbers, strings
    and typing aliases are not containers and pass as they are.
    """
    tree = ast.parse(source)
    found = [f"{where}:{name} (global)" for node in ast.walk(tree)
             if isinstance(node, ast.Global) for name in node.names]
    for node in _top_level(tree.body):
        if isinstance(node, ast.AugAssign):
            found.append(f"{where}:{ast.unparse(node.target)} (changed in place)")
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = ast.unparse(target)
            if isinstance(target, (ast.Subscript, ast.Attribute)):
                found.append(f"{where}:{name} (changed in place)")
            elif _is_mutable(node.value) and not (
                    name == "__all__" and isinstance(node.value, ast.List)
                    and all(isinstance(e, ast.Constant) for e in node.value.elts)):
                found.append(f"{where}:{name}")
    return found


def test_no_module_level_mutable_state_in_store_and_driver():
    """No sweep's or process's state in a module global of ``store/`` or ``driver/``
    (:func:`module_state` states the rule)."""
    checked = [p for p in MODULES if rel(p).startswith(STATELESS_ROOMS)]
    assert len(checked) > 50  # the rooms are where the test looks for them
    found = {place for path in checked for place in module_state(path.read_text(), rel(path))}
    assert found - KNOWN_STATE == set(), "module-level state:\n" + "\n".join(
        sorted(found - KNOWN_STATE))
    assert KNOWN_STATE <= found, f"gone, delete from KNOWN_STATE: {KNOWN_STATE - found}"


@pytest.mark.parametrize("source, expected", [
    ("_POOLS: dict[str, Any] = {}", ["_POOLS"]),
    ("_SEEN = set()", ["_SEEN"]),
    ("_BY = collections.defaultdict(list)", ["_BY"]),
    ("W = weakref.WeakKeyDictionary()", ["W"]),
    ("TABLE = {'a': 1}", ["TABLE"]),
    ("NAMES = [n for n in 'ab']", ["NAMES"]),
    ("ALL = BASE | {'a': 1}", ["ALL"]),
    ("__all__ = ['a', 'b'] + [x for x in 'c']", ["__all__"]),
    ("class C:\n    cache = {}", ["cache"]),
    ("try:\n    X = []\nexcept ImportError:\n    X = None", ["X"]),
    ("if True:\n    pass\nelse:\n    Y = dict()", ["Y"]),
    ("COUNT = 0\nCOUNT += 1", ["COUNT (changed in place)"]),
    ("os.environ['A'] = '1'", ["os.environ['A'] (changed in place)"]),
    ("def f():\n    global N\n    N = 1", ["N (global)"]),
    ("__all__ = ['a', 'b']", []),
    ("TABLE = MappingProxyType({'a': 1})", []),
    ("NAMES = ('a', 'b')\nSEEN = frozenset({'a'})\nRX = re.compile('a')", []),
    ("ENDED = frozenset(STATUSES) - UNFINISHED\nMIN_FREE = 1 << 30", []),
    ("logger = logging.getLogger(__name__)\nPoint = Sequence[float]", []),
    ("def f():\n    seen = set()\n    return seen", []),
    ("@dataclass\nclass C:\n    rows: list = field(default_factory=list)", []),
])
def test_the_module_state_rule_by_example(source, expected):
    assert [p.split(":", 1)[1] for p in module_state(source, "m.py")] == expected


def test_test_modules_import_each_other_relatively():
    """CI runs plain ``pytest`` from a clean clone, where ``tests`` is not importable as a
    top-level package (``python -m pytest`` puts the working directory on ``sys.path`` and
    hides it): a test module imports its neighbours with ``from .module import ...``."""
    tests = Path(__file__).parent
    offences = [f"{p.relative_to(tests)}:{i}" for p in sorted(tests.rglob("*.py"))
                for i, line in enumerate(p.read_text().splitlines(), 1)
                if re.match(r"\s*(from tests[. ]|import tests\b)", line)]
    assert not offences, offences
