"""Held-out evaluation, the same on every rank."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from hpsearch.train.workload import Workload

__all__ = ["evaluate"]


@torch.no_grad()
def evaluate(model: nn.Module, workload: Workload, val_set: Dataset, batches_of, autocast, device: torch.device,
              rank: int, world_size: int, batch_size: int) -> dict[str, float]:
    """Held-out loss and metrics, averaged over samples across all ranks.

    Runs on the unwrapped model: ranks may see different numbers of batches, and the DDP
    wrapper's forward could try to sync buffers with ranks that have already finished.
    """
    model.eval()
    chunks = list(torch.arange(rank, len(val_set), world_size).split(batch_size))
    loss_sum = torch.zeros((), device=device)
    sums: dict[str, torch.Tensor] = {}
    count = 0
    for idx, batch in zip(chunks, batches_of(val_set, chunks)):
        with autocast:
            loss, outputs = workload.compute_loss(model, batch)
        n = len(idx)
        loss_sum += loss.detach().float() * n
        if workload.metrics is not None:
            for name, value in workload.metrics(outputs, batch).items():
                value = torch.as_tensor(value, device=device).detach().float() * n
                sums[name] = sums[name] + value if name in sums else value
        count += n
    model.train()
    totals = torch.stack([loss_sum, *sums.values(), torch.tensor(float(count), device=device)])
    if world_size > 1:
        dist.all_reduce(totals)
    totals = (totals[:-1] / totals[-1]).tolist()
    return {"val_loss": totals[0], **{f"val_{name}": v for name, v in zip(sums, totals[1:])}}
