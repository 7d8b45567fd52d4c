"""The trivial trial of ``benchmarks/scale.py``: the harness training a 2x2 linear layer
on 8 samples, one step per epoch (``trainable: benchmarks._trivial:WORKLOAD``)."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from hpsearch.train.workload import Workload


def build_model(config: dict) -> torch.nn.Module:
    torch.manual_seed(int(config.get("seed", 0)))
    return torch.nn.Linear(2, 2)


def build_data(config: dict) -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 2, generator=g)
    y = (x[:, 0] > 0).long()
    return TensorDataset(x[:8], y[:8]), TensorDataset(x[8:], y[8:])


WORKLOAD = Workload(build_model=build_model, build_data=build_data,
                    description="2x2 linear layer on 8 samples (benchmarks/scale.py)")
