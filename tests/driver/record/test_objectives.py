"""Several objectives and constraints as the study records them (#24): reports of a
study of several objectives in user attributes, read back with those of one objective;
constraint violations as Optuna's samplers take them. Real Optuna, its journal file."""

from __future__ import annotations

import math
import warnings

import optuna
import pytest

from hpsearch.driver.record.objectives import (
    CONSTRAINTS_ATTR, ConstraintMetricMissing, check_first_report, constraints_func,
    directions, feasible, missing_metrics, report_values, reported, sampler_constraints,
    set_constraints, violations,
)
from hpsearch.driver.record.study import open_study
from hpsearch.space.spec import Constraint, Objective
from hpsearch.store.layout import SweepDir

optuna.logging.set_verbosity(optuna.logging.WARNING)
LOSS, SPEED = Objective("val_loss", "min"), Objective("samples_per_s", "max")


@pytest.mark.parametrize("constraint, value, violation", [
    (Constraint("acc", min=0.5), 0.75, -0.25),
    (Constraint("acc", min=0.5), 0.25, 0.25),
    (Constraint("mem", max=100), 90, -10),
    (Constraint("mem", max=100), 130, 30),
    (Constraint("x", min=0, max=1), 0.5, -0.5),
    (Constraint("x", min=0, max=1), 1.5, 0.5),
    (Constraint("x", min=0, max=1), -2, 2),
    (Constraint("acc", min=0.5), math.nan, math.inf),
    (Constraint("acc", min=0.5), None, math.inf),
    (Constraint("acc", min=0.5), "n/a", math.inf),
])
def test_a_constraints_violation_is_how_far_its_bound_is_broken(constraint, value, violation):
    assert constraint.violation(value) == pytest.approx(violation)


def test_constraints_describe_themselves_and_judge_a_report():
    both = (Constraint("val_accuracy", min=0.5), Constraint("peak_mem_mb", max=70000))
    assert [c.describe() for c in both] == ["val_accuracy >= 0.5", "peak_mem_mb <= 70000"]
    assert Constraint("x", min=0, max=1).describe() == "0 <= x <= 1"
    assert feasible(both, {"val_accuracy": 0.6, "peak_mem_mb": 512})
    assert not feasible(both, {"val_accuracy": 0.6, "peak_mem_mb": 80000})
    assert not feasible(both, {"val_accuracy": 0.6})  # a missing metric breaks its bound
    assert violations(both, {"val_accuracy": 0.6, "peak_mem_mb": 80000}) == \
        pytest.approx([-0.1, 10000])
    assert feasible((), {})


def test_a_first_report_without_a_named_metric_is_one_line_with_its_key_path():
    report = {"val_loss": 0.4, "epoch": 1, "samples_per_s": 900.0, "done": False,
              "time_total_s": 3.0, "config/lr": 0.1, "pid": 7, "val_acc": 0.9}
    cons = (Constraint("val_accuracy", min=0.5),)
    assert missing_metrics(report, (LOSS, SPEED), cons) == ["constraints[0].metric: val_accuracy"]
    with pytest.raises(ConstraintMetricMissing) as err:
        check_first_report(report, (LOSS, SPEED), cons)
    message = str(err.value)
    assert "\n" not in message and "constraints[0].metric: val_accuracy" in message
    assert "; it reports epoch, samples_per_s, val_acc, val_loss." in message
    assert "val_accuracy (did you mean `val_acc`?)" in message
    check_first_report({**report, "val_accuracy": 0.9}, (LOSS, SPEED), cons)  # no error
    # peak_mem_mb is null on a CPU: a bound on it would make every trial infeasible.
    on_cpu = {**report, "val_accuracy": 0.9, "peak_mem_mb": None}
    assert missing_metrics(on_cpu, (LOSS,), (Constraint("peak_mem_mb", max=7e4),)) == [
        "constraints[0].metric: peak_mem_mb"]


def test_reports_of_one_and_of_several_objectives_read_back_the_same_way(tmp_path):
    assert directions((LOSS, SPEED)) == ["minimize", "maximize"]
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "mo.journal")))
    several = optuna.create_study(storage=storage, directions=directions((LOSS, SPEED)))
    trial = several.ask()
    with pytest.raises(NotImplementedError):  # why the attributes: Optuna refuses report
        trial.report(0.5, 1)
    for step, values in ((1, (0.9, 1000.0)), (3, (0.5, 950.0))):
        report_values(trial, step, values)
    several.tell(trial, [0.5, 950.0])
    (tmp_path / "so").mkdir()
    one, _ = open_study(SweepDir(tmp_path / "so"))
    single = one.ask()
    for step, value in ((1, 0.9), (3, 0.5)):
        report_values(single, step, (value,))
    one.tell(single, 0.5)
    again = optuna.load_study(study_name=several.study_name, storage=storage)
    assert reported(again.trials[0]) == {1: (0.9, 1000.0), 3: (0.5, 950.0)}
    assert reported(one.trials[0]) == {1: 0.9, 3: 0.5}
    assert one.trials[0].intermediate_values == {1: 0.9, 3: 0.5}  # pruners still read them


def test_constraints_reach_the_sampler_and_the_front_leaves_infeasible_trials_out():
    # x in [0, 1]: objectives (x, 1 - x) trade off everywhere; the constraint x >= 0.6
    # makes the left part infeasible. TPE told the constraints proposes feasible points
    # far more often once its start-up is over, and Optuna's front skips infeasible trials.
    cons = (Constraint("x", min=0.6),)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated constraints_func on 5
        sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=10,
                                             **sampler_constraints(len(cons)))
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    for _ in range(40):
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        set_constraints(trial, violations(cons, {"x": x}))
        study.tell(trial, [x, 1 - x])
    x0 = study.trials[0].params["x"]
    assert study.trials[0].user_attrs[CONSTRAINTS_ATTR] == [pytest.approx(0.6 - x0)]
    xs = [t.params["x"] for t in study.trials]
    late = sum(x >= 0.6 for x in xs[20:]) / 20
    assert late >= 0.8 and late > sum(x >= 0.6 for x in xs[:10]) / 10
    assert study.best_trials and all(t.params["x"] >= 0.6 for t in study.best_trials)


def test_optuna_4s_constraints_func_reads_the_stored_violations_or_breaks_every_bound():
    read = constraints_func(2)

    class Frozen:
        user_attrs: dict = {}

    assert read(Frozen()) == [1e300, 1e300]
    Frozen.user_attrs = {CONSTRAINTS_ATTR: [-1.0, math.inf]}
    assert read(Frozen()) == [-1.0, 1e300]


def test_the_record_a_resume_reads_holds_a_study_of_several_objectives(tmp_path):
    from hpsearch.driver.record.study import recorded_trials

    study = optuna.create_study(directions=directions((LOSS, SPEED)))
    for n, end in enumerate(("complete", "pruned", "running")):
        trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1)})
        trial.set_user_attr("trial_id", f"t{n}")
        report_values(trial, 1, (0.9 - n / 10, 1000.0 + n))
        if end == "complete":
            study.tell(trial, [0.5, 950.0])
        elif end == "pruned":
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    done, pruned, running = recorded_trials(study)
    assert done.value == (0.5, 950.0) and pruned.value is None and running.value is None
    assert done.intermediate == {1: (0.9, 1000.0)} and running.intermediate == {1: (0.7, 1002.0)}
    assert not running.ended and pruned.ended
