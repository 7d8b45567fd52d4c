"""``objective`` as a list and ``constraints`` (#24): the format of the issue loads into
the spec, one mapping means what it always meant, and each bad input is one issue with
its key path. Through the CLI, validate exits 2 with the lines and no traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hpsearch.cli import main
from hpsearch.errors import SpaceError
from hpsearch.space import load_space, parse_space
from hpsearch.space.spec import Constraint, Objective

BASE = {
    "trainable": "digits",
    "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
}
TWO = [{"metric": "val_loss", "mode": "min"}, {"metric": "samples_per_s", "mode": "max"}]
BOUNDS = [{"metric": "val_accuracy", "min": 0.5}, {"metric": "peak_mem_mb", "max": 70000}]

ISSUE_FORMAT = """\
trainable: digits
objective:
  - {metric: val_loss, mode: min}
  - {metric: samples_per_s, mode: max}
constraints:
  - {metric: val_accuracy, min: 0.5}
  - {metric: peak_mem_mb, max: 70000}
params:
  lr: {type: float, low: 1.0e-3, high: 1.0e-1, log: true}
"""


def test_the_issues_format_loads_into_several_objectives_and_constraints(tmp_path):
    path = tmp_path / "mo.yaml"
    path.write_text(ISSUE_FORMAT)
    spec = load_space(path)
    assert spec.objectives == (Objective("val_loss", "min"), Objective("samples_per_s", "max"))
    assert spec.objective == Objective("val_loss", "min") and spec.several_objectives
    assert spec.constraints == (Constraint("val_accuracy", min=0.5),
                                Constraint("peak_mem_mb", max=70000))
    out = CliRunner().invoke(main, ["validate", str(path)])
    assert out.exit_code == 0, out.output
    assert "minimize val_loss and maximize samples_per_s (a Pareto front)" in out.output
    assert "constraint  val_accuracy >= 0.5" in out.output


def test_one_mapping_or_a_list_of_one_is_a_single_objective_sweep_as_before():
    one = parse_space({**BASE, "objective": {"metric": "val_loss", "mode": "min"}})
    listed = parse_space({**BASE, "objective": [{"metric": "val_loss", "mode": "min"}]})
    assert one == listed and not one.several_objectives and one.constraints == ()
    constrained = parse_space({**BASE, "objective": TWO[0], "constraints": BOUNDS[:1]})
    assert not constrained.several_objectives and len(constrained.constraints) == 1


@pytest.mark.parametrize("objective, constraints, extra, expected", [
    ([TWO[0], {"metric": "val_loss", "mode": "max"}], None, {},
     [("objective[1].metric", "duplicate")]),
    ([TWO[0], {"metric": "samples_per_s"}], None, {}, [("objective[1].mode", "missing")]),
    ([TWO[0], {"mode": "max"}], None, {}, [("objective[1].metric", "missing")]),
    ([TWO[0], {"metric": "x", "mode": "up"}], None, {}, [("objective[1].mode", "choice")]),
    ([], None, {}, [("objective", "type")]),
    ([TWO[0], "samples_per_s"], None, {}, [("objective[1]", "type")]),
    (TWO[0], [{"metric": "val_accuracy"}], {}, [("constraints[0]", "missing")]),
    (TWO[0], [{"metric": "m", "min": 10, "max": 5}], {}, [("constraints[0].min", "range")]),
    (TWO[0], [{"metric": "m", "min": "high"}], {}, [("constraints[0].min", "type")]),
    (TWO[0], [{"metric": "m", "below": 5}], {}, [("constraints[0].below", "unknown_key"),
                                                ("constraints[0]", "missing")]),
    (TWO[0], {"metric": "m", "min": 1}, {}, [("constraints", "type")]),
    ([TWO[0], {"metric": "lr", "mode": "max"}], None, {}, [("objective[1].metric", "name")]),
    ([TWO[0], {"metric": "wall_s", "mode": "min"}], None, {}, [("objective[1].metric", "name")]),
])
def test_each_bad_objective_or_constraint_is_one_issue_at_its_key_path(
        objective, constraints, extra, expected):
    raw = {**BASE, "objective": objective, **extra}
    if constraints is not None:
        raw["constraints"] = constraints
    with pytest.raises(SpaceError) as info:
        parse_space(raw)
    assert [(i.path, i.kind) for i in info.value.issues] == expected


def test_validate_prints_each_problem_on_one_line_without_a_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(ISSUE_FORMAT.replace("{metric: samples_per_s, mode: max}",
                                         "{metric: samples_per_s}")
                    .replace("{metric: peak_mem_mb, max: 70000}", "{metric: peak_mem_mb}"))
    out = CliRunner().invoke(main, ["validate", str(path)])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert "objective[1].mode: required key is missing" in out.output
    assert "constraints[1]: a constraint needs `min`, `max` or both" in out.output
