"""Running sum mod 10: a GRU reads digits and says, at each position, the sum so far mod 10.

The third recorded workload of the search-quality replay (#38), of another shape than
``digits`` (an MLP classifying images) and ``charlm`` (a transformer language model): a
recurrent network on an algorithmic sequence task, whose accuracy tends to sit near chance
for a while and then climb, so a rung judged early can mistake a late learner for a bad
one. It is held out from the choice of defaults.

Data: generated from ``data_seed`` (default 0), nothing downloaded: ``n_train`` (4,096)
and ``n_val`` (1,024) sequences of ``length`` (16) uniform digits; the target at position
``t`` is ``(x_0 + ... + x_t) mod 10``.

Model: an embedding of ``embed`` (16) per digit, one GRU layer of ``hidden`` units (64 by
default) and a linear read-out to 10 classes at every position (~17k parameters at 64).
The loss and ``val_accuracy`` are per position (the harness's default cross-entropy and
accuracy take ``(batch, time, classes)`` logits).

Cost: an epoch is 64 steps at batch size 64; about 0.3-0.6 s on one CPU core at
``hidden: 64``.

    python benchmarks/record_curves.py --space benchmarks/workloads/running_sum.yaml \\
        --configs 300 --seeds 2 --out benchmarks/data/curves-running-sum.parquet
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.train.workload import Workload, accuracy

__all__ = ["WORKLOAD", "build_data", "build_model"]

DEFAULTS = {"hidden": 64, "embed": 16, "length": 16, "n_train": 4096, "n_val": 1024,
            "data_seed": 0}


class RunningSumGRU(nn.Module):
    """Digits in, a class per position out."""

    def __init__(self, hidden: int, embed: int):
        super().__init__()
        self.embed = nn.Embedding(10, embed)
        self.gru = nn.GRU(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.gru(self.embed(x))
        return self.out(h)


def build_model(config: dict) -> nn.Module:
    return RunningSumGRU(int(config.get("hidden", DEFAULTS["hidden"])),
                         int(config.get("embed", DEFAULTS["embed"])))


def build_data(config: dict) -> tuple[TensorDataset, TensorDataset]:
    c = {**DEFAULTS, **{k: config[k] for k in DEFAULTS if k in config}}
    gen = torch.Generator().manual_seed(int(c["data_seed"]))
    n_train, n_val, length = int(c["n_train"]), int(c["n_val"]), int(c["length"])
    x = torch.randint(0, 10, (n_train + n_val, length), generator=gen)
    y = torch.cumsum(x, dim=1) % 10
    return (TensorDataset(x[:n_train], y[:n_train]),
            TensorDataset(x[n_train:], y[n_train:]))


WORKLOAD = Workload(
    build_model=build_model,
    build_data=build_data,
    metrics=accuracy,
    description="GRU (17k params) on running sums mod 10 of generated digits",
    defaults=DEFAULTS,
)
