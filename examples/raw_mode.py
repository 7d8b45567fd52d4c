"""Bring your own training loop, raw mode: a Ray Train ``train_loop_per_worker``.

hpsearch runs this function on every worker of a Ray Train ``TorchTrainer`` (the process
group is already set up) with the trial's config: the sampled parameters, the fixed ones
and the budget (``epochs``, or ``max_steps`` when the scheduler counts steps). The loop
is yours; hpsearch needs only reports that carry

* the objective metric named in the space file (``val_loss`` here), and
* the scheduler's time attribute, ``epoch``, as the integer number of epochs completed,
  so that ASHA can compare trials at its milestones,

sent with ``ray.train.report``. Checkpoints are optional: pass one with the report, and
read ``ray.train.get_checkpoint()`` at start to resume after a failure.

Harness mode (``examples/harness_mode.py``) does all of this for you; use raw mode when
your training does not fit the harness.

Run it as a sweep from the repository root: ``hpsearch run examples/raw_mode.yaml``.
"""

from __future__ import annotations

import os
import tempfile

import torch
from torch import nn


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

    digits = load_digits()
    return torch.tensor(digits.data, dtype=torch.float32) / 16.0, torch.tensor(digits.target)


def train_loop_per_worker(config: dict) -> None:
    import ray.train
    import ray.train.torch

    torch.manual_seed(int(config.get("seed", 0)))
    x, y = _digits()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train_set = torch.utils.data.TensorDataset(x[order[300:]], y[order[300:]])
    val_x, val_y = x[order[:300]], y[order[:300]]

    context = ray.train.get_context()
    per_worker = int(config.get("batch_size", 64)) // context.get_world_size()
    loader = ray.train.torch.prepare_data_loader(  # adds a DistributedSampler
        torch.utils.data.DataLoader(train_set, batch_size=per_worker, shuffle=True)
    )
    model = ray.train.torch.prepare_model(  # moves to the device, wraps in DDP
        nn.Sequential(nn.Linear(64, int(config.get("hidden", 64))), nn.ReLU(), nn.Linear(int(config.get("hidden", 64)), 10))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config.get("momentum", 0.9))

    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]

    device = next(model.parameters()).device
    for epoch in range(start, int(config["epochs"])):
        if context.get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        model.eval()
        with torch.no_grad():
            logits = model(val_x.to(device))
            val_loss = nn.functional.cross_entropy(logits, val_y.to(device)).item()
            val_accuracy = (logits.argmax(1) == val_y.to(device)).float().mean().item()
        metrics = {"epoch": epoch + 1, "val_loss": val_loss, "val_accuracy": val_accuracy}

        with tempfile.TemporaryDirectory() as d:
            saved = None
            if context.get_world_rank() == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1},
                           os.path.join(d, "state.pt"))
                saved = ray.train.Checkpoint.from_directory(d)
            ray.train.report(metrics, checkpoint=saved)  # every rank reports
