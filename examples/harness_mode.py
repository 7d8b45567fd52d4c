"""Bring your own model, harness mode: hand hpsearch a model and data, it does the rest.

The harness (``hpsearch.train``) runs the training loop for you: AdamW with warmup and
cosine decay, fp32/bf16/fp16, gradient clipping, evaluation, checkpoints and resume,
DistributedDataParallel over the trial's workers, and reports ASHA and Optuna can use.
You write two functions that build things from the trial's config:

* ``build_model(config) -> nn.Module``
* ``build_data(config) -> (train_set, val_set)``, map-style datasets of ``(x, y)``

and, if cross-entropy on ``model(x)`` is not your loss, a ``loss(model, batch)``. Here: a
tiny CNN on scikit-learn's 8x8 digits seen as 1x8x8 images, with ``channels`` searched.

Run it once without Ray, from the repository root::

    python -m examples.harness_mode

or as a sweep with ``examples/harness_mode.yaml``
(``trainable: examples.harness_mode:WORKLOAD``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.train import Workload, accuracy


def build_model(config: dict) -> nn.Module:
    channels = int(config.get("channels", 16))
    return nn.Sequential(
        nn.Conv2d(1, channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Flatten(),
        nn.Linear(channels * 4 * 4, 10),
    )


def build_data(config: dict) -> tuple[TensorDataset, TensorDataset]:
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8)
    y = torch.tensor(digits.target)
    # The held-out split must not depend on the trial's seed, or trials are scored on
    # different images.
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    val, train = order[:300], order[300:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val])


WORKLOAD = Workload(
    build_model=build_model,
    build_data=build_data,
    metrics=accuracy,  # reported as val_accuracy
    description="tiny CNN on 8x8 digits (user-model example)",
)


if __name__ == "__main__":
    from hpsearch.train import LocalSession, train

    def show(report: dict) -> None:
        print(f"epoch {report['epoch']}: val_loss {report['val_loss']:.3f}, val_accuracy {report['val_accuracy']:.3f}")

    train({"lr": 5e-3, "epochs": 5, "channels": 16}, WORKLOAD, LocalSession(on_report=show))
