"""Spec -> the Optuna search space, its sampler and the scheduler. Nothing here starts Ray."""

from __future__ import annotations

import pickle

import optuna
import pytest

from hpsearch.space import parse_space
from hpsearch.driver.search.samplers import make_sampler
from hpsearch.driver.search.schedulers import SweepASHA, make_scheduler
from hpsearch.driver.search.space import define_by_run, inside

optuna.logging.set_verbosity(optuna.logging.WARNING)

PARAMS = {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
    "warmup_steps": {"type": "int", "low": 0, "high": 400, "step": 50},
    "layers": {"type": "int", "low": 1, "high": 16, "log": True},
    "precision": {"type": "categorical", "choices": ["fp32", "bf16", "fp16"]},
    "loss_scale_init": {"type": "float", "low": 1024, "high": 65536, "log": True,
                        "when": {"precision": "fp16"}},
    "weight_decay": {"type": "float", "low": 0.0, "high": 0.1, "step": 0.01},
    "batch_size": 64,
}


def make_spec(mode="min", algorithm="tpe", params=None, **sections):
    return parse_space({
        "trainable": "charlm",
        "objective": {"metric": "val_loss", "mode": mode},
        "params": params or PARAMS,
        "search": {"algorithm": algorithm, "seed": 7, "n_startup_trials": 4},
        **sections,
    })


def hand_written(trial: optuna.Trial) -> dict:
    out = {
        "lr": trial.suggest_float("lr", 1e-4, 3e-2, log=True),
        "warmup_steps": trial.suggest_int("warmup_steps", 0, 400, step=50),
        "layers": trial.suggest_int("layers", 1, 16, log=True),
        "precision": trial.suggest_categorical("precision", ["fp32", "bf16", "fp16"]),
    }
    if out["precision"] == "fp16":
        out["loss_scale_init"] = trial.suggest_float("loss_scale_init", 1024, 65536, log=True)
    out["weight_decay"] = trial.suggest_float("weight_decay", 0.0, 0.1, step=0.01)
    return out


def run_study(spec, space, n_trials=20):
    direction = "minimize" if spec.objective.mode == "min" else "maximize"
    study = optuna.create_study(direction=direction, sampler=make_sampler(spec))
    study.optimize(lambda t: (space(t), (t.number * 7919) % 13 / 13)[1], n_trials=n_trials)
    return [t.params for t in study.trials]


@pytest.mark.parametrize("algorithm", ["tpe", "random"])
@pytest.mark.parametrize("mode", ["min", "max"])
def test_define_by_run_matches_hand_written_optuna_under_the_same_seed(mode, algorithm):
    spec = make_spec(mode=mode, algorithm=algorithm)
    ours = run_study(spec, define_by_run(spec))
    theirs = run_study(spec, hand_written)
    assert ours == theirs
    assert len({p["precision"] for p in ours}) > 1


def test_conditional_param_is_suggested_only_when_its_condition_holds():
    spec = make_spec(algorithm="random")
    seen = run_study(spec, define_by_run(spec), n_trials=30)
    for params in seen:
        assert ("loss_scale_init" in params) == (params["precision"] == "fp16")
    assert {p["precision"] for p in seen} == {"fp32", "bf16", "fp16"}


def test_params_come_in_file_order_without_fixed_values():
    spec = make_spec(algorithm="random")
    study = optuna.create_study(sampler=make_sampler(spec))
    sampled = define_by_run(spec)(study.ask())
    names = [n for n in PARAMS if n in sampled]
    assert list(sampled) == names
    assert "batch_size" not in sampled
    assert spec.trial_config(sampled)["batch_size"] == 64


def test_integer_bounds_are_inclusive_at_both_ends():
    spec = make_spec(algorithm="random", params={
        "small": {"type": "int", "low": 0, "high": 2},
        "warmup_steps": {"type": "int", "low": 0, "high": 400, "step": 50},
        "lr": 0.01,
    })
    seen = run_study(spec, define_by_run(spec), n_trials=80)
    assert {p["small"] for p in seen} == {0, 1, 2}
    assert {0, 400} <= {p["warmup_steps"] for p in seen}


def test_define_by_run_pickles_for_tune_checkpoints():
    spec = make_spec()
    clone = pickle.loads(pickle.dumps(define_by_run(spec)))
    assert clone.params == spec.params


def test_sampler_follows_the_search_section():
    tpe = make_sampler(make_spec())
    assert isinstance(tpe, optuna.samplers.TPESampler)
    assert tpe._n_startup_trials == 4
    assert isinstance(make_sampler(make_spec(algorithm="random")), optuna.samplers.RandomSampler)


@pytest.mark.parametrize("mode", ["min", "max"])
def test_asha_scheduler_uses_time_attr_objective_and_rungs(mode):
    spec = make_spec(mode=mode, scheduler={"type": "asha", "time_attr": "epoch", "max_t": 12,
                                           "grace_period": 1, "reduction_factor": 3,
                                           "brackets": 1})
    scheduler = make_scheduler(spec)
    assert isinstance(scheduler, SweepASHA)
    assert (scheduler.time_key, scheduler.metrics, scheduler.max_t) == ("epoch", ["val_loss"], 12)
    assert scheduler.rungs.milestones == spec.scheduler.rungs() == (1, 3, 9)
    assert scheduler.rungs.sign == (-1.0 if mode == "min" else 1.0)


def test_step_time_based_asha_and_fifo():
    from ray.tune.schedulers import FIFOScheduler

    step = make_scheduler(make_spec(scheduler={"time_attr": "step", "max_t": 900,
                                               "grace_period": 100}))
    assert step.time_key == "step" and step.max_t == 900 and step.rungs.milestones == (100, 300)
    timed = make_scheduler(make_spec(params={**PARAMS, "epochs": 20}, scheduler={
        "time_attr": "time", "max_t": 90, "grace_period": 10}))
    assert timed.time_key == "time_total_s" and timed.rungs.milestones == (10, 30)
    fifo = make_scheduler(make_spec(scheduler={"type": "fifo"}))
    assert type(fifo) is FIFOScheduler


@pytest.mark.parametrize("name, value, expected", [
    ("lr", 1e-4, True), ("lr", 3e-2, True), ("lr", 3.1e-2, False), ("lr", "x", False),
    ("warmup_steps", 150, True), ("warmup_steps", 160, False), ("warmup_steps", 450, False),
    ("layers", 16, True), ("layers", 2.5, False),
    ("precision", "bf16", True), ("precision", "fp8", False),
    ("weight_decay", 0.03, True), ("weight_decay", 0.035, False),
])
def test_inside_agrees_with_what_define_by_run_could_suggest(name, value, expected):
    param = next(p for p in make_spec().params if p.name == name)
    assert inside(param, value) is expected


def test_space_module_imports_neither_ray_nor_optuna():
    import subprocess
    import sys

    code = ("import sys, hpsearch.driver.search.space; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'optuna', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
