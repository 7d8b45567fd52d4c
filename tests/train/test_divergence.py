"""Divergence: a non-finite loss, or a real blow-up (a training loss far above its first
value), ends the run as ``diverged`` instead of "completed" with a loss of 1e17."""

from __future__ import annotations

import math

import pytest

from hpsearch.train import LocalSession, train
from hpsearch.workloads import digits

BASE = {"epochs": 2, "batch_size": 64, "seed": 0}


def run(**config):
    session = LocalSession()
    result = train({**BASE, **config}, digits.WORKLOAD, session)
    return result, session.reports


def test_an_exploding_learning_rate_is_diverged_within_one_window(one_torch_thread):
    result, reports = run(lr=1e9, diverge_window=8)
    assert result.status == "diverged"
    assert "exploded" in result.reason and "10x its first value" in result.reason
    assert result.step <= 8  # caught at the first check, not at the end of the epoch
    assert reports[-1]["status"] == "diverged" and math.isnan(reports[-1]["val_loss"])


def test_a_healthy_run_is_not_flagged(one_torch_thread):
    result, _ = run(lr=3e-3)
    assert result.status == "completed"


def test_the_rule_can_be_turned_off(one_torch_thread):
    result, reports = run(lr=1e9, diverge_factor=0, grad_clip=0)
    # Without the rule only a non-finite loss stops it; what is left is the old behaviour.
    assert result.status in ("completed", "diverged")
    if result.status == "diverged":
        assert "non-finite" in result.reason


@pytest.mark.parametrize("key, value", [("diverge_factor", -1), ("diverge_window", 0)])
def test_bad_rule_settings_are_config_errors(key, value):
    with pytest.raises(ValueError, match=f"config.{key}"):
        run(lr=1e-3, **{key: value})
