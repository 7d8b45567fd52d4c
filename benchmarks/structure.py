"""Structure: how a sweep's record is wired, counted so a restructure can be compared.

Prints one table for a checkout (``--root``, default this one), five questions:

(a) **lines** of ``hpsearch/``: every ``.py`` file, all lines and the non-blank ones.

(b) **the full-disk feature**, (c) **the several-objectives feature**: the modules whose
    *code* names the feature, and how many references. Read with ``ast``, so comments and
    docstrings never count. A reference is one syntax node that names one of the
    feature's identifiers: a name (``DiskWatch``), an attribute (``x.disk``,
    ``spec.several_objectives``), an imported name, a keyword argument (``disk=...``), a
    parameter (``disk: Any = None``), a function or class defined under that name, an
    import of one of the feature's modules, or a string constant equal to one of its
    status or column names (``"disk_full"``, ``"pareto"``). ``self.disk.paused`` is one
    reference (the ``.disk``). The identifiers are the tables ``DISK`` and
    ``OBJECTIVES`` below (the names at 2a9da76; a restructure that renames them should
    add its new names there, not remove the old ones). Each feature also says in how many
    modules its *branch* sits: for the full disk, modules outside its own home
    (``FEATURE_HOMES``) that name it; for several objectives, modules that read
    ``.several_objectives`` (its definition in ``space/spec.py`` not counted).

(d) **a report's way to its Parquet row**, (e) **a space followed from ``run_sweep`` to
    the first trial**: traced at run time in one small real sweep (300 trials of the
    trivial trainable of ``scale.py``, one at a time; it starts a local Ray, so hold the
    machine's Ray lock). ``sys.setprofile`` on the driver's thread records each call
    whose callee is a function of ``hpsearch/``; its *caller* is the nearest hpsearch
    frame above it (through library frames: Optuna calling hpsearch's journal counts as
    the searcher's call), unless Ray Tune's loop lies between them: then the call is an
    *entry* (Tune calling one of hpsearch's plug-ins), not an edge. Rooms are ``tests/test_architecture.py``'s (``room_of``), ordered by its
    ``LAYERS`` (read from the checkout; the list at 2a9da76 when absent).

    (d) follows one report (the first after the sweep's first table write, so an
    ordinary write; the sweep's first report when no such report is written before the
    end): every entry from Tune named ``on_trial_result`` carrying that trial's report of
    that iteration (the searcher's, the scheduler's, the callbacks': "handed to N
    hooks"), and the first later entry whose calls write a Parquet file
    (``pyarrow.parquet.write_table``, ``DataFrame.to_parquet``): the write that holds
    the report. Printed: **hops**, the
    hpsearch functions on the longest chain that takes the report in (from the hook to
    the deepest call under it) plus those on the longest chain from the writing hook to
    the Parquet call (a lambda's or a generator expression's frame is part of the
    function it is written in, not a hop; the figures before the record took the study
    step counted them); the distinct hpsearch **functions** and **modules** called on both
    ways; **crossings**, the distinct caller->callee edges between two rooms on both
    ways (of which between ``driver.*`` and ``store``).

    (d') follows the same report to its trial row and to the study: the stack from its
    hook to the first call of ``TrialRecords.result`` (the row changed), and to the
    first call from hpsearch into Optuna (the study's step, the Optuna call counted as
    one hop). "A report reaches its row through one owner in at most 4 hops" (issue 36)
    is read here, the Parquet write being (d)'s second half.

    (e) counts the distinct caller->callee edges from the call of ``run_sweep`` until
    Tune first starts a trial (its first entry named ``on_trial_start``), in
    ``run_sweep``'s own calls and in the searcher's ``suggest`` (Tune's other hooks in
    that span, e.g. the callbacks' ``on_step_end``, are left out):
    **crossings** between ``driver.*`` and ``store`` (either way), and **climbs back
    up**: edges between rooms in which the callee's room is not below the caller's in
    ``LAYERS``'s order, plus every edge that goes down to another room, which climbs
    back up when it returns. So it is the number of distinct cross-room calls: an
    operation done in one call across a room's door climbs once; the same work done in
    five calls across it climbs five times. Distinct edges, not calls, so a loop
    counts once. Also printed: the rooms that ``driver.sweep``'s own operations call into
    (the doors the composing room uses), and the room pairs the climbs join.

    python benchmarks/structure.py [--root DIR] [--static] [--show]

``--static`` skips (d) and (e) (no Ray); ``--show`` prints the modules and edges behind
each figure. Standard library only, besides the checkout's own ``hpsearch`` (and what
it needs to run a sweep) for (d) and (e).
"""

from __future__ import annotations

import argparse
import ast
import functools
import io
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

#: The full-disk feature: identifiers, string constants, modules (at 2a9da76).
DISK = {
    "names": {"DiskWatch", "DiskFullError", "is_disk_full", "says_disk_full",
              "DISK_FULL_ERRNOS", "disk_full_error", "check_free_space", "storage_need",
              "StorageNeed", "NEARLY_FULL", "_disk_full_ends", "disk", "disk_full"},
    "strings": {"disk_full"},
    "modules": {"hpsearch.driver.monitor.disk", "hpsearch.driver.sweep.storage"},
}

#: The several-objectives feature (constraints are counted apart: ``CONSTRAINTS``).
OBJECTIVES = {
    "names": {"several_objectives", "more_objectives", "read_objectives", "directions",
              "report_values", "REPORT_ATTR", "ParetoRungs", "pareto_order", "fronts",
              "dominates", "FrontSections", "objective_columns", "pareto",
              # named since: the rows' front (store/reports.py) and the study's value
              "ParetoFront", "front_for", "NO_FRONT", "study_value"},
    # Only as an attribute: ``spec.objectives``, every objective (a bare ``objectives``
    # is also a local name of the parsing and of single-objective code).
    "attrs": {"objectives"},
    "strings": {"pareto"},
    "modules": {"hpsearch.driver.search.pareto", "hpsearch.report._front"},
}

CONSTRAINTS = {
    "names": {"constraints", "Constraint", "read_constraints", "violations", "feasible",
              "set_constraints", "sampler_constraints", "constraints_func",
              "CONSTRAINTS_ATTR", "ConstraintMetricMissing", "flag_columns"},
    "strings": {"feasible"},
    "modules": set(),
}

#: Modules that are a feature's own home: references there are not a branch in the core.
FEATURE_HOMES = {
    "disk": {"hpsearch/driver/monitor/disk.py", "hpsearch/driver/sweep/storage.py",
             "hpsearch/errors.py"},
    "objectives": {"hpsearch/driver/search/objectives.py", "hpsearch/driver/search/pareto.py",
                   "hpsearch/driver/record/objectives.py",  # where search/objectives.py went
                   "hpsearch/report/_front.py", "hpsearch/space/_objectives.py"},
}

#: tests/test_architecture.py's LAYERS at 2a9da76, used when the checkout has none.
LAYERS = ["cli", "driver.sweep", "driver.monitor", "driver.trials", "driver.limits",
          "driver.search", "driver.cluster", "driver.internals", "report", "store", "space",
          "command", "workloads", "train", "fence", "errors"]


# --- static: lines and features ---------------------------------------------------------


def py_files(root: Path) -> list[Path]:
    return sorted((root / "hpsearch").rglob("*.py"))


def lines(root: Path) -> tuple[int, int, int]:
    total = nonblank = 0
    files = py_files(root)
    for path in files:
        text = path.read_text().splitlines()
        total += len(text)
        nonblank += sum(1 for ln in text if ln.strip())
    return len(files), total, nonblank


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def references(tree: ast.AST, feature: dict) -> Counter:
    """The feature's references in one module's syntax tree, by identifier."""
    names, strings, modules = feature["names"], feature["strings"], feature["modules"]
    attrs = names | feature.get("attrs", set())
    docs = _docstrings(tree)
    found: Counter = Counter()
    for node in ast.walk(tree):
        hit = None
        if isinstance(node, ast.Name) and node.id in names:
            hit = node.id
        elif isinstance(node, ast.Attribute) and node.attr in attrs:
            hit = "." + node.attr
        elif isinstance(node, ast.keyword) and node.arg in names:
            hit = node.arg + "="
        elif isinstance(node, ast.arg) and node.arg in names:
            hit = "param " + node.arg
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.name in names:
            hit = "def " + node.name
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] in names:
            hit = "import " + node.name.split(".")[-1]
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            hit = "from " + node.module
        elif isinstance(node, ast.Import) and any(a.name in modules for a in node.names):
            hit = "import module"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in strings and id(node) not in docs:
            hit = repr(node.value)
        if hit is not None:
            found[hit] += 1
    return found


def feature_count(root: Path, feature: dict) -> dict[str, Counter]:
    out = {}
    for path in py_files(root):
        found = references(ast.parse(path.read_text()), feature)
        if found:
            out[path.relative_to(root).as_posix()] = found
    return out


def objective_branches(root: Path) -> list[str]:
    """Modules reading ``.several_objectives`` (not the module defining it)."""
    out = []
    for path in py_files(root):
        tree = ast.parse(path.read_text())
        defines = any(isinstance(n, ast.FunctionDef) and n.name == "several_objectives"
                      for n in ast.walk(tree))
        reads = any(isinstance(n, ast.Attribute) and n.attr == "several_objectives"
                    for n in ast.walk(tree))
        if reads and not defines:
            out.append(path.relative_to(root).as_posix())
    return out


# --- run time: a report's way, and run_sweep to the first trial -------------------------


def layers_of(root: Path) -> list[str]:
    path = root / "tests" / "test_architecture.py"
    if path.exists():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets):
                return ast.literal_eval(node.value)
    return LAYERS


#: The call that changes a trial's row with a report (the same at 2a9da76 and since).
ROW_VERB = "hpsearch.store.records:TrialRecords.result"

#: Frames of an expression inside a function, not a function of their own: no hop.
EXPRESSIONS = ("<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")


def hops(stack) -> int:
    """The functions on a call stack of qualified names, its expressions' frames (a
    lambda handed to ``write_atomic``, a generator expression) not counted."""
    return sum(not name.endswith(EXPRESSIONS) for name in stack)


def room_of(module: str) -> str:
    """As tests/test_architecture.py's ``room_of``."""
    parts = module.split(".")[1:]
    if not parts or parts == ["__main__"]:
        return "hpsearch"
    if parts[0] == "driver" and len(parts) > 1:
        return f"driver.{parts[1]}"
    return parts[0]


def trace_child(root: Path) -> None:
    """Runs in a fresh process whose ``hpsearch`` is the checkout's: one tiny sweep,
    traced; prints one JSON line."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    pkg = str(root / "hpsearch") + os.sep
    import hpsearch
    from hpsearch.space import parse_space

    assert hpsearch.__file__.startswith(pkg), hpsearch.__file__
    spec = parse_space({
        "name": "structure",
        "trainable": "benchmarks._trivial:WORKLOAD",
        "objective": {"metric": "val_loss", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                   "batch_size": 8, "checkpoint_every": 0},
        "search": {"algorithm": "tpe", "seed": 0, "n_startup_trials": 10},
        # No rung at epoch 1: a first report is always an ordinary one (not a stop).
        "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": 4, "grace_period": 2,
                      "reduction_factor": 2},
        # Enough trials that the run lasts past TablesCallback's 2 s between writes.
        "trials": {"num": 300, "max_concurrent": 1},
        "resources": {"workers": 1, "cpus_per_worker": 1},
    })
    run_sweep = hpsearch.run_sweep
    module_names: dict[str, str] = {}

    def where(code) -> str | None:
        f = code.co_filename
        if not f.startswith(pkg):
            return None
        name = module_names.get(f)
        if name is None:
            rel = Path(f).relative_to(root).with_suffix("").parts
            name = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
            module_names[f] = name
        return name

    def fn(code, module) -> str:
        return f"{module}:{getattr(code, 'co_qualname', code.co_name)}"

    def is_parquet_write(code) -> bool:
        f = code.co_filename.replace(os.sep, "/")
        return (code.co_name == "write_table" and "/pyarrow/parquet/" in f) or \
            (code.co_name == "to_parquet" and "/pandas/" in f)

    def is_optuna(code) -> bool:
        return "/optuna/" in code.co_filename.replace(os.sep, "/")

    def is_tune(code) -> bool:
        return "/ray/tune/" in code.co_filename.replace(os.sep, "/")

    def attempt() -> dict:
        return {"report": None, "entries": [], "write_stacks": [], "calls": set(),
                "edges": set(), "depth_in": 0, "open": None, "write_entry": None,
                "in_stacks": {}, "row_stack": None, "study_stack": None}

    # (d) follows two reports: the sweep's first (its first write creates the tables) and
    # the first after that write (an ordinary write); the second is printed when whole.
    def reads_only(frame) -> bool:
        """A property read or a module's import: a step, not an operation."""
        code = frame.f_code
        if code.co_name == "<module>":
            return True
        if not code.co_argcount or code.co_varnames[0] != "self":
            return False
        owner = getattr(type(frame.f_locals.get("self")), code.co_name, None)
        return isinstance(owner, (property, functools.cached_property))

    state = {"phase": "before", "edges_e": set(), "reads_e": set(), "calls_e": 0, "hook": None,
             "started": False, "attempts": [attempt()]}
    def caller_of(frame):
        """The nearest hpsearch frame above ``frame`` (through library frames, e.g.
        Optuna calling hpsearch's journal), or ``None`` when Ray Tune's loop comes first:
        then the call is an entry (Tune calling a plug-in)."""
        frame = frame.f_back
        while frame is not None:
            if where(frame.f_code) is not None:
                return frame
            if is_tune(frame.f_code):
                return None
            frame = frame.f_back
        return None

    def chain(frame) -> list:
        """The hpsearch frames from the entry (below Tune's loop) down to ``frame``."""
        out = []
        while frame is not None:
            if where(frame.f_code) is not None:
                out.append(frame)
            elif is_tune(frame.f_code) and out:
                break
            frame = frame.f_back
        return out[::-1]

    def named(frames) -> list[str]:
        return [fn(f.f_code, where(f.f_code)) for f in frames]

    def profiler(frame, event, arg):
        if event != "call":
            if event == "return":
                cur = state["attempts"][-1]
                if frame is state["hook"]:
                    state["hook"] = None
                if frame is cur["open"]:
                    cur["open"] = None
                if frame is cur["write_entry"]:
                    if len(state["attempts"]) < 2:
                        state["attempts"].append(attempt())
                    else:
                        state["phase"] = "done"
                        sys.setprofile(None)  # the rest of the sweep runs untraced
            return
        code = frame.f_code
        phase = state["phase"]
        if phase == "before":
            if code is run_sweep.__code__:
                state["phase"] = "e"
            return
        if phase == "done":
            return
        cur = state["attempts"][-1]
        if phase == "d" and cur["report"] is not None and is_parquet_write(code):
            frames = chain(frame.f_back)
            if not frames:
                return
            stack = named(frames)
            if cur["write_entry"] is None:
                cur["write_entry"] = frames[0]
            if stack not in cur["write_stacks"]:
                cur["write_stacks"].append(stack)
            cur["edges"].update(zip(stack, stack[1:]))
            cur["calls"].update(stack)
            return
        module = where(code)
        if module is None:
            if phase == "d" and cur["open"] is not None and cur["study_stack"] is None \
                    and is_optuna(code) and where(frame.f_back.f_code) is not None:
                cur["study_stack"] = named(chain(frame.f_back)) + [f"optuna:{code.co_name}"]
            return
        name = fn(code, module)
        caller = caller_of(frame)
        if caller is None:  # an entry: Tune calling one of hpsearch's plug-ins
            if phase == "e":
                if code.co_name == "on_trial_start":
                    state["phase"], state["started"] = "d", True
                elif code.co_name != "suggest" and state["hook"] is None:
                    state["hook"] = frame  # Tune's other hooks: not the way to a trial
            elif code.co_name == "on_trial_result" and cur["open"] is None:
                result = frame.f_locals.get("result") or {}
                key = [result.get("trial_id"), result.get("training_iteration")]
                if cur["report"] is None and key[1] == 1:
                    cur["report"] = key
                if key == cur["report"]:
                    cur["open"] = frame
                    cur["entries"].append(name)
                    cur["calls"].add(name)
            return
        edge = (fn(caller.f_code, where(caller.f_code)), name)
        if phase == "e":
            if state["hook"] is None:
                state["edges_e"].add(edge)
                if edge not in state["reads_e"] and reads_only(frame):
                    state["reads_e"].add(edge)
                state["calls_e"] += room_of(module) != room_of(where(caller.f_code))
        elif cur["open"] is not None:
            cur["calls"].add(name)
            cur["edges"].add(edge)
            stack = named(chain(frame))
            if name == ROW_VERB and cur["row_stack"] is None:
                cur["row_stack"] = stack
            cur["depth_in"] = max(cur["depth_in"], hops(stack))
            if hops(stack) > hops(cur["in_stacks"].get(stack[0], ())):
                cur["in_stacks"][stack[0]] = stack

    with tempfile.TemporaryDirectory(prefix="hpsearch-structure-") as tmp:
        sys.setprofile(profiler)
        try:
            run_sweep(spec, storage=tmp, stream=io.StringIO())
        finally:
            sys.setprofile(None)
    whole = [a for a in state["attempts"] if a["write_stacks"] and a["entries"]]
    d = whole[-1] if whole else state["attempts"][0]
    print("RESULT " + json.dumps({
        "edges_e": sorted(state["edges_e"]), "calls_e": state["calls_e"],
        "reads_e": sorted(state["reads_e"]),
        "edges_d": sorted(d["edges"]), "calls_d": sorted(d["calls"]),
        "entries": d["entries"], "report": d["report"], "write_stacks": d["write_stacks"],
        "in_stacks": list(d["in_stacks"].values()), "row_stack": d["row_stack"],
        "study_stack": d["study_stack"],
        "depth_in": d["depth_in"], "ordinary_write": len(whole) == 2,
        "reached_first_trial": state["started"]}), flush=True)


def traced(root: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(root), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, __file__, "--root", str(root), "_trace"],
                          capture_output=True, text=True, cwd=root, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"the traced sweep failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                     f"{proc.stderr[-5000:]}")


def room_fn(name: str) -> str:
    return room_of(name.split(":")[0])


def _hops_of(stack) -> str:
    return "?" if not stack else str(hops(stack))


def report_way(t: dict) -> dict:
    edges = [tuple(e) for e in t["edges_d"]]
    cross = [(a, b) for a, b in edges if room_fn(a) != room_fn(b)]
    ds = [(a, b) for a, b in cross
          if {room_fn(a).split(".")[0], room_fn(b).split(".")[0]} == {"driver", "store"}]
    write_depth = max((hops(s) for s in t["write_stacks"]), default=0)
    modules = {c.split(":")[0] for c in t["calls_d"]}
    return {"hops": t["depth_in"] + write_depth, "hops_in": t["depth_in"],
            "hops_write": write_depth, "functions": len(set(t["calls_d"])),
            "modules": len(modules), "crossings": len(cross), "driver_store": len(ds),
            "_modules": sorted(modules), "_cross": cross}


def first_trial_way(t: dict, layers: list[str]) -> dict:
    rank = {room: i for i, room in enumerate(layers)}
    edges = [tuple(e) for e in t["edges_e"]]
    cross = [(a, b) for a, b in edges if room_fn(a) != room_fn(b)]
    ds = [(a, b) for a, b in cross
          if {room_fn(a).split(".")[0], room_fn(b).split(".")[0]} == {"driver", "store"}]
    up = [(a, b) for a, b in cross
          if rank.get(room_fn(b), -1) <= rank.get(room_fn(a), -1)]
    reads = {tuple(e) for e in t["reads_e"]}
    ops = [c for c in cross if c not in reads]
    ds_ops = [c for c in ds if c not in reads]
    doors = sorted({room_fn(b) for a, b in ops if room_fn(a) == "driver.sweep"})
    return {"driver_store": len(ds), "climbs": len(cross), "upward_calls": len(up),
            "edges": len(edges), "ops": len(ops), "ds_ops": len(ds_ops), "_cross": cross,
            "_ds": ds, "_up": up, "_ops": ops, "doors": doors,
            "room_pairs": len({(room_fn(a), room_fn(b)) for a, b in ops})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=HERE,
                        help="the checkout to count (default: this one)")
    parser.add_argument("--static", action="store_true",
                        help="skip (d) and (e), which run a tiny sweep (starts Ray)")
    parser.add_argument("--show", action="store_true",
                        help="print the modules and edges behind each figure")
    parser.add_argument("what", nargs="?", choices=["_trace"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = args.root.resolve()
    if args.what == "_trace":
        sys.path.insert(0, str(root))
        trace_child(root)
        return
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "?"
    files, total, nonblank = lines(root)
    rows = [("(a) lines of hpsearch/", f"{total:,} in {files} .py files ({nonblank:,} non-blank)")]
    details = []
    for label, key, feature in (("(b) full-disk feature", "disk", DISK),
                                ("(c) several-objectives feature", "objectives", OBJECTIVES),
                                ("(c') constraints (apart)", "constraints", CONSTRAINTS)):
        found = feature_count(root, feature)
        refs = sum(sum(c.values()) for c in found.values())
        text = f"{len(found)} modules, {refs} references"
        if key in FEATURE_HOMES:
            outside = [m for m in found if m not in FEATURE_HOMES[key]]
            text += f"; {len(outside)} modules outside its home " \
                    f"({sum(sum(found[m].values()) for m in outside)} references)"
        if key == "objectives":
            text += f"; `.several_objectives` read in {len(objective_branches(root))} modules"
        rows.append((label, text))
        details.append((label, {m: dict(c) for m, c in found.items()}))
    if not args.static:
        t = traced(root)
        d = report_way(t)
        e = first_trial_way(t, layers_of(root))
        rows.append(("(d) a report to its Parquet row",
                     f"{d['hops']} hops ({d['hops_in']} in + {d['hops_write']} to the write), "
                     f"handed to {len(t['entries'])} hooks, "
                     f"{d['functions']} functions in {d['modules']} modules, {d['crossings']} "
                     f"room crossings ({d['driver_store']} driver<->store)"
                     + ("" if t["ordinary_write"] else "; the sweep's first write")))
        rows.append(("(d') the report to its row and to the study",
                     f"{_hops_of(t.get('row_stack'))} hops to its row, "
                     f"{_hops_of(t.get('study_stack'))} to the study (the Optuna call "
                     "counted)"))
        rows.append(("(e) run_sweep to the first trial",
                     f"{e['ops']} climbs back up, {e['ds_ops']} driver<->store crossings "
                     f"(without property reads and imports; with them {e['climbs']} and "
                     f"{e['driver_store']}); {e['upward_calls']} upward calls; "
                     f"{e['edges']} distinct hpsearch call edges; the sweep's room calls into "
                     f"{len(e['doors'])} rooms, the climbs join {e['room_pairs']} room pairs"
                     + ("" if t["reached_first_trial"] else " (NO trial started)")))
        details += [("(d) entries", t["entries"]),
                    ("(d') to its row", t.get("row_stack") or []),
                    ("(d') to the study", t.get("study_stack") or []),
                    ("(d) deepest stack under each hook", t.get("in_stacks", [])),
                    ("(d) write stacks", t["write_stacks"]),
                    ("(d) modules", d["_modules"]), ("(d) crossings", d["_cross"]),
                    ("(e) driver<->store", e["_ds"]), ("(e) upward calls", e["_up"]),
                    ("(e) rooms the sweep's room calls into", e["doors"]),
                    ("(e) climbs (operations)", e["_ops"]), ("(e) climbs (all)", e["_cross"])]
    print(f"\nstructure of {root.name} at {commit}\n")
    print("| what | count |\n| --- | --- |")
    for what, text in rows:
        print(f"| {what} | {text} |")
    if args.show:
        for label, value in details:
            print(f"\n{label}:")
            if isinstance(value, dict):
                for k, v in value.items():
                    print(f"  {k}: {v}")
            else:
                for v in value:
                    print(f"  {v}")


if __name__ == "__main__":
    main()
