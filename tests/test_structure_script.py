"""``benchmarks/structure.py``: the counts it prints for a checkout follow its written
rules (what is a feature's reference, what is a climb back up), so that the figures
before and after a restructure compare."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import structure  # noqa: E402


def test_a_feature_reference_is_code_that_names_it_never_a_comment_or_docstring():
    code = textwrap.dedent('''
        """The DiskWatch and "disk_full" named in a docstring do not count."""
        from hpsearch.driver.monitor.disk import DiskWatch  # DiskWatch in a comment

        def build(sweep, disk=None):
            """disk_full"""
            watch = DiskWatch(sweep)
            run(disk=watch)
            if self.disk.paused:
                return "disk_full"
            return "disk full"
    ''')
    found = structure.references(ast.parse(code), structure.DISK)
    assert dict(found) == {
        "from hpsearch.driver.monitor.disk": 1, "import DiskWatch": 1, "param disk": 1,
        "DiskWatch": 1, "disk=": 1, ".disk": 1, "'disk_full'": 1}


def test_objectives_count_as_an_attribute_only():
    code = "objectives = spec.objectives\nif spec.several_objectives:\n    x = 'pareto'\n"
    found = structure.references(ast.parse(code), structure.OBJECTIVES)
    assert dict(found) == {".objectives": 1, ".several_objectives": 1, "'pareto'": 1}


def test_a_climb_back_up_is_a_distinct_call_across_rooms():
    run, fit = "hpsearch.driver.sweep.run:run_sweep", "hpsearch.driver.sweep.fit:SweepRun.fit"
    layout = "hpsearch.store.layout:SweepDir.name"
    sweeps = "hpsearch.store.sweeps:create"
    stopper = "hpsearch.driver.monitor.stops:SweepStopper._why"
    trace = {"edges_e": [[run, fit], [run, layout], [run, sweeps], [fit, layout],
                         [stopper, fit], [sweeps, "hpsearch.errors:is_disk_full"]],
             "reads_e": [[run, layout], [fit, layout]]}
    got = structure.first_trial_way(trace, structure.LAYERS)
    # Same room (run -> fit) does not climb; the upward call (monitor -> sweep) does.
    assert got["climbs"] == 5 and got["upward_calls"] == 1 and got["driver_store"] == 3
    # Property reads are not operations: run -> sweeps.create is the one that stays.
    assert got["ops"] == 3 and got["ds_ops"] == 1
    # The rooms driver.sweep's operations enter (the store; the read does not count), and
    # the room pairs all operations join (sweep->store, monitor->sweep, store->errors).
    assert got["doors"] == ["store"] and got["room_pairs"] == 3


def test_a_lambda_or_generator_expression_is_no_hop_of_its_own():
    stack = ["hpsearch.driver.record.sweep_record:SweepRecord.flush",
             "hpsearch.store.layout:write_atomic",
             "hpsearch.store.parts:HistoryWriter._write_part.<locals>.<lambda>",
             "hpsearch.store.parts:f.<locals>.<genexpr>"]
    assert structure.hops(stack) == 2


def test_the_static_table_counts_every_line_of_the_package():
    files = sorted((ROOT / "hpsearch").rglob("*.py"))
    total = sum(len(p.read_text().splitlines()) for p in files)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "structure.py"),
                          "--static", "--root", str(ROOT)],
                         capture_output=True, text=True, check=True).stdout
    assert f"| (a) lines of hpsearch/ | {total:,} in {len(files)} .py files" in out
    assert "| (b) full-disk feature | " in out and "| (c) several-objectives feature | " in out
