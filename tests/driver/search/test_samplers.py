"""The samplers ``search.algorithm`` names, and QMC-then-TPE. Nothing here starts Ray."""

from __future__ import annotations

import pickle

import optuna
import pytest

from hpsearch.driver.search.samplers import QMCThenTPE, make_sampler
from hpsearch.space import parse_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_spec(algorithm):
    return parse_space({
        "name": "s", "trainable": "digits", "objective": {"metric": "val_loss", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        "search": {"algorithm": algorithm, "seed": 3, "n_startup_trials": 2}})


def test_gp_and_qmc_samplers_are_what_the_space_asks_for():
    assert isinstance(make_sampler(make_spec("gp")), optuna.samplers.GPSampler)
    qmc = make_sampler(make_spec("qmc"))
    assert isinstance(qmc, QMCThenTPE) and qmc._n_qmc == 2


def test_qmc_then_tpe_takes_sobol_points_first_then_tpe():
    def objective(trial):
        x = trial.suggest_float("lr", 1e-3, 1.0)
        y = trial.suggest_int("y", 0, 8)
        return (x - 0.3) ** 2 + (y - 2) ** 2 / 64

    ours = optuna.create_study(sampler=QMCThenTPE(n_qmc=6, seed=1))
    ours.optimize(objective, n_trials=12)
    sobol = optuna.create_study(sampler=optuna.samplers.QMCSampler(
        qmc_type="sobol", scramble=True, seed=1, warn_independent_sampling=False))
    sobol.optimize(objective, n_trials=6)
    assert [t.params for t in ours.trials[:6]] == [t.params for t in sobol.trials]
    tpe = ours.sampler
    assert not tpe.uses_qmc(ours, ours.trials[7])
    assert pickle.loads(pickle.dumps(tpe))._n_qmc == 6


def qmc_warnings(sampler):
    """The warnings Optuna's QMC logger gives while four trials of a conditional space
    (``loss_scale`` only with fp16) are asked, none yet told, as a sweep's first wave is."""
    import logging

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("optuna.samplers._qmc")
    logger.addHandler(handler)
    verbosity = optuna.logging.get_verbosity()  # another module's import may have raised it
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(sampler=sampler)
        for _ in range(4):
            trial = study.ask()
            if trial.suggest_categorical("precision", ["fp32", "fp16"]) == "fp16":
                trial.suggest_float("loss_scale", 1.0, 10.0)
            trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    finally:
        logger.removeHandler(handler)
        optuna.logging.set_verbosity(verbosity)
    return seen


def test_a_conditional_space_asked_concurrently_prints_no_qmc_warning():
    """Optuna's QMCSampler warns on each ask of the first wave that the space has
    conditions; QMC-then-TPE handles them (the rest goes to a random sampler), so the
    sweep's console stays clean. Other warnings of that logger still pass."""
    bare = qmc_warnings(optuna.samplers.QMCSampler(seed=0, warn_independent_sampling=False))
    assert any("does not include any conditions" in m for m in bare)
    assert not [m for m in qmc_warnings(QMCThenTPE(n_qmc=8, seed=0))
                if "does not include any conditions" in m]
    assert not optuna.logging.get_logger("optuna.samplers._qmc").filters  # none left behind


def test_nsga2_is_offered_for_several_objectives_and_told_the_constraints():
    import warnings

    from hpsearch.driver.record.objectives import directions, set_constraints, violations
    from hpsearch.space.spec import Constraint

    spec = parse_space({
        "name": "s", "trainable": "digits",
        "objective": [{"metric": "val_loss", "mode": "min"}, {"metric": "speed", "mode": "max"}],
        "constraints": [{"metric": "val_loss", "max": 0.3}],
        "params": {"lr": {"type": "float", "low": 1e-3, "high": 1.0}},
        "search": {"algorithm": "nsga2", "seed": 3, "n_startup_trials": 8}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated constraints_func on 5
        sampler = make_sampler(spec)
    assert isinstance(sampler, optuna.samplers.NSGAIISampler)
    study = optuna.create_study(directions=directions(spec.objectives), sampler=sampler)
    cons = (Constraint("val_loss", max=0.3),)
    for _ in range(48):  # 6 generations of 8: loss = x, speed = x**0.5, feasible for x <= 0.3
        trial = study.ask()
        x = trial.suggest_float("lr", 1e-3, 1.0)
        set_constraints(trial, violations(cons, {"val_loss": x}))
        study.tell(trial, [x, x ** 0.5])
    front = study.best_trials  # constrained domination: the front is the feasible one
    assert front and all(t.params["lr"] <= 0.3 for t in front)
    assert all(t.user_attrs["constraints"] == [pytest.approx(t.params["lr"] - 0.3)]
               for t in study.trials)
