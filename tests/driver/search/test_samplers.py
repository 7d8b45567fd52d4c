"""The samplers ``search.algorithm`` names, and QMC-then-TPE. Nothing here starts Ray."""

from __future__ import annotations

import pickle

import optuna

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
        x = trial.suggest_float("x", 0.0, 1.0)
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
