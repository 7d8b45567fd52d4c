"""The end-of-sweep lines of a sweep of several objectives (#24): the front's size and,
for each objective, the front's trial best on it with its rerun line. No Ray: the result
is built by hand, as fit returns it."""

from __future__ import annotations

import shlex

from hpsearch.cli.run import print_summary
from hpsearch.driver.sweep.result import SweepResult
from hpsearch.space import parse_space

SPACE = {
    "trainable": "digits",
    "objective": [{"metric": "val_loss", "mode": "min"},
                  {"metric": "samples_per_s", "mode": "max"}],
    "constraints": [{"metric": "val_accuracy", "min": 0.5}],
    "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
}


def test_the_summary_names_the_fronts_size_and_its_ends(tmp_path, capsys):
    spec = parse_space(SPACE)
    front = [{"trial_id": "aa", "lr": 0.02, "val_loss": 0.09, "samples_per_s": 30000.0},
             {"trial_id": "bb", "lr": 0.005, "val_loss": 0.2, "samples_per_s": 55000.0},
             {"trial_id": "cc", "lr": 0.01, "val_loss": 0.1, "samples_per_s": 40000.0}]
    result = SweepResult(tmp_path / "mo", "finished", plan=None, counts={"completed": 3},
                         front=front)
    print_summary(result, spec)
    out = capsys.readouterr().out
    assert "front of val_loss (min) and samples_per_s (max): 3 trial(s)" in out
    assert "best val_loss 0.09 (trial aa; samples_per_s 3e+04): lr=0.02" in out
    assert "best samples_per_s 5.5e+04 (trial bb; val_loss 0.2): lr=0.005" in out
    reruns = [shlex.split(line.split("rerun it:", 1)[1]) for line in out.splitlines()
              if "rerun it:" in line]
    assert [r[-1] for r in reruns] == ["lr=0.02", "lr=0.005"]


def test_a_front_with_no_trial_says_why(tmp_path, capsys):
    result = SweepResult(tmp_path / "mo", "finished", plan=None, counts={"stopped_by_asha": 4})
    print_summary(result, parse_space(SPACE))
    assert "no trial is on it yet (none completed and feasible)" in capsys.readouterr().out


def test_hpsearch_trial_ends_with_every_objective_and_whether_it_was_feasible(tmp_path):
    import yaml
    from click.testing import CliRunner

    from hpsearch.cli import main

    raw = {**SPACE, "scheduler": {"type": "fifo", "max_t": 2},
           "constraints": [{"metric": "val_accuracy", "min": 1.5}]}  # no model keeps it
    path = tmp_path / "mo.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = CliRunner().invoke(main, ["trial", str(path), "--set", "lr=0.01"])
    last = out.output.strip().splitlines()[-1]
    assert last.startswith("completed: val_loss = ") and ", samples_per_s = " in last
    assert last.endswith("; infeasible: breaks val_accuracy >= 1.5"), last
