"""The replay's held-out workload (``benchmarks/workloads/running_sum.py``, #38): its data
is what its docstring says, the same for a given ``data_seed``, and the harness trains it."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))

from benchmarks.workloads.running_sum import WORKLOAD, build_data  # noqa: E402


def test_targets_are_running_sums_mod_10_and_the_data_is_fixed_by_its_seed():
    train, val = build_data({"n_train": 64, "n_val": 16, "length": 5})
    x, y = train.tensors
    assert x.shape == (64, 5) and len(val) == 16
    assert torch.equal(y[:, 0], x[:, 0])
    assert torch.equal(y[:, 3], x[:, :4].sum(dim=1) % 10)
    again, _ = build_data({"n_train": 64, "n_val": 16, "length": 5})
    other, _ = build_data({"n_train": 64, "n_val": 16, "length": 5, "data_seed": 1})
    assert torch.equal(again.tensors[0], x) and not torch.equal(other.tensors[0], x)


def test_the_harness_trains_it_past_chance():
    """At a good learning rate the loss leaves chance (ln 10 = 2.30) within a few epochs:
    the drop the replay's early stopping must not mistake for a bad trial."""
    from hpsearch.train import train
    from hpsearch.train.session import LocalSession

    reports = []
    train({"lr": 4e-3, "grad_clip": 1.0, "epochs": 7, "batch_size": 64, "seed": 0},
          WORKLOAD, LocalSession(on_report=reports.append))
    losses = [r["val_loss"] for r in reports if "val_loss" in r]
    assert len(losses) == 7 and losses[0] > 2.0 and losses[-1] < 1.0, losses
