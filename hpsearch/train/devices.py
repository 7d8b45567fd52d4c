"""Where a worker trains: its rank in the process group, its device and seeds, and the
few collectives the loop makes over them."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hpsearch.train.session import Session

__all__ = ["gather", "global_mean", "peak_mem_mb", "process_group", "seed_everything",
           "training_device"]


def process_group() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def training_device(use_gpu: bool, session: Session) -> torch.device:
    if use_gpu and torch.cuda.is_available():
        # The runner may know this worker's GPU better than its local rank does (Ray Train
        # shows a node's workers all their GPUs; workers sharing a GPU share its index).
        index = getattr(session, "device_index", None)
        device = torch.device("cuda", session.local_rank if index is None else index)
        torch.cuda.set_device(device)
        # peak_mem_mb is this run's own, also in a process that trained before (Tune reuses
        # the actors of one-worker trials).
        torch.cuda.reset_peak_memory_stats(device)
        return device
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def global_mean(loss_sum: torch.Tensor, steps: int, world_size: int) -> float:
    total = loss_sum.detach().clone()
    if world_size > 1:
        dist.all_reduce(total)
    return total.item() / (steps * world_size)


def gather(obj: Any, world_size: int) -> list[Any]:
    if world_size == 1:
        return [obj]
    out: list[Any] = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def peak_mem_mb(device: torch.device) -> float | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return None
