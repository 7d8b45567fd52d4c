"""search.algorithm gp / qmc and scheduler.time_attr: time, as the space file states them."""

from __future__ import annotations

import pytest

from hpsearch.errors import SpaceError
from hpsearch.space import parse_space, summarize


def space(**sections):
    params = sections.pop("params", {"lr": {"type": "float", "low": 1e-4, "high": 1e-1,
                                            "log": True}})
    return {"name": "s", "trainable": "digits",
            "objective": {"metric": "val_loss", "mode": "min"}, "params": params, **sections}


@pytest.mark.parametrize("algorithm", ["tpe", "random", "gp", "qmc"])
def test_every_sampler_is_accepted(algorithm):
    spec = parse_space(space(search={"algorithm": algorithm, "n_startup_trials": 5}))
    assert spec.search.algorithm == algorithm


def test_an_unknown_sampler_lists_the_choices():
    with pytest.raises(SpaceError, match="must be one of qmc, tpe, random, gp, nsga2"):
        parse_space(space(search={"algorithm": "cmaes"}))


def test_time_attr_time_needs_the_trials_length_in_params():
    with pytest.raises(SpaceError, match="set `epochs` or `max_steps` in params"):
        parse_space(space(scheduler={"time_attr": "time", "max_t": 60, "grace_period": 5}))


def test_time_attr_time_counts_seconds_and_leaves_the_length_to_params():
    spec = parse_space(space(
        params={"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}, "epochs": 8},
        scheduler={"time_attr": "time", "max_t": 90, "grace_period": 10}))
    s = spec.scheduler
    assert (s.result_key, s.unit, s.budget_key, s.rungs()) == ("time_total_s", "seconds",
                                                               None, (10, 30))
    assert spec.trial_config({"lr": 0.01})["epochs"] == 8  # not max_t
    assert "rungs at seconds 10, 30" in summarize(spec)


def test_epoch_and_step_keep_their_budget_key():
    assert parse_space(space()).trial_config({"lr": 0.01})["epochs"] == 10
    spec = parse_space(space(scheduler={"time_attr": "step", "max_t": 500, "grace_period": 50}))
    assert spec.scheduler.result_key == "step" and spec.trial_config({})["max_steps"] == 500
