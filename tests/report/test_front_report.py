"""The report of a sweep of several objectives (#24): a Pareto front section with the
figure, the front's trials and a rerun line each, and a Front row in the summary; the
report of a single-objective sweep has none of it. No Ray: the sweep is written with the
driver's own records and tables writer."""

from __future__ import annotations

import re

import yaml

from hpsearch.report import write_report
from hpsearch.space import parse_space
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import new_manifest, write_manifest
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import write_tables

SPACE = {
    "name": "mo", "trainable": "digits",
    "objective": [{"metric": "val_loss", "mode": "min"},
                  {"metric": "samples_per_s", "mode": "max"}],
    "constraints": [{"metric": "val_accuracy", "min": 0.5}],
    "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
    "scheduler": {"type": "asha", "max_t": 3, "grace_period": 1, "reduction_factor": 3},
}
#: (trial, lr, val_loss, samples_per_s, val_accuracy, epochs): a and b on the front, c
#: dominated, d infeasible, e stopped by ASHA at epoch 1.
TRIALS = [("a", 0.02, 0.5, 100.0, 0.9, 3), ("b", 0.01, 0.4, 50.0, 0.9, 3),
          ("c", 0.005, 0.6, 90.0, 0.9, 3), ("d", 0.05, 0.1, 1000.0, 0.2, 3),
          ("e", 0.002, 1.5, 80.0, 0.6, 1)]


def make_sweep(tmp_path, raw):
    spec = parse_space(raw)
    sweep = SweepDir(tmp_path / raw["name"])
    sweep.path.mkdir()
    sweep.space.write_text(yaml.safe_dump(raw, sort_keys=False))
    records = TrialRecords(spec)
    for tid, lr, loss, speed, acc, epochs in TRIALS:
        records.start(tid, {"lr": lr})
        for e in range(1, epochs + 1):
            records.result(tid, {"val_loss": loss, "samples_per_s": speed, "val_accuracy": acc,
                                 "epoch": e, "training_iteration": e, "step": 10 * e,
                                 "time_total_s": float(e)})
        if epochs < 3:
            records.stopped_by_scheduler(tid)
        records.end(tid, returned=True)
    write_tables(records, sweep)
    manifest = new_manifest(name=raw["name"], argv=["hpsearch", "run", "s.yaml"], seed=0,
                            cluster={"CPU": 2.0}, address=None,
                            objective={"metric": "val_loss", "mode": "min"})
    manifest["status"] = "finished"
    write_manifest(sweep, manifest)
    return sweep


def test_the_report_draws_and_lists_the_front(tmp_path):
    sweep = make_sweep(tmp_path, SPACE)
    paths = write_report(sweep.path)
    md = paths.md.read_text()
    section = md.split("## Pareto front")[1].split("\n## ")[0]
    assert "2 trial(s) on the front" in section and "kept every constraint" in section
    assert "![the front of val\\_loss (min) and samples\\_per\\_s (max)](report-images/front.png)" \
        in section
    table = [ln for ln in section.splitlines() if ln.startswith("| ")][1:]
    assert [ln.split(" | ")[0] for ln in table[1:]] == ["| b", "| a"]  # by val_loss
    reruns = re.findall(r"hpsearch trial \S+ --set lr=(\S+)", section)
    assert reruns == ["0.01", "0.02"]
    assert (sweep.path / "report-images" / "front.png").stat().st_size > 10_000
    assert "2 trial(s) on the Pareto front of val\\_loss and samples\\_per\\_s (see Pareto" in md
    assert md.index("## Pareto front") < md.index("## Best objective over time")


def test_a_single_objective_report_has_no_front(tmp_path):
    raw = {**SPACE, "name": "so", "objective": SPACE["objective"][0]}
    del raw["constraints"]
    md = write_report(make_sweep(tmp_path, raw).path).md.read_text()
    assert "Pareto front" not in md and "front.png" not in md
