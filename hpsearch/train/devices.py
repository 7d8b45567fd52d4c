"""Where a worker trains: its rank in the process group, its device and seeds, and the
few collectives the loop makes over them."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hpsearch.train.session import Session

__all__ = ["FIRST_COLLECTIVE_S", "first_collective", "from_rank0", "gather", "global_mean", "peak_mem_mb",
           "process_group", "seed_everything", "training_device"]

#: How long the first all-reduce of a trial may take before the trial fails.
FIRST_COLLECTIVE_S = 60.0


def process_group() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def first_collective(device: torch.device, world: int, *, within_s: float = FIRST_COLLECTIVE_S
                     ) -> None:
    """A one-element all-reduce as training starts. A process group whose ranks cannot
    reach each other (NCCL on an interface that does not connect the nodes, InfiniBand
    misconfigured) fails here in ``within_s`` seconds with one line, not at the first
    gradient all-reduce after the group's timeout.

    Raises:
        RuntimeError: The all-reduce did not complete in time, or gave a wrong sum.
    """
    if world <= 1:
        return
    import datetime

    ones = torch.ones(1, device=device)
    try:
        dist.all_reduce(ones, async_op=True).wait(timeout=datetime.timedelta(seconds=within_s))
        total = int(ones.item())
    except RuntimeError as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise RuntimeError(
            f"the first all-reduce between the {world} workers did not complete within "
            f"{within_s:g} s ({first}). Across nodes this is most often NCCL on the wrong "
            "network interface: set NCCL_SOCKET_IFNAME to the one the nodes reach each other "
            "on (and NCCL_IB_DISABLE=1 without InfiniBand); `hpsearch doctor` checks it"
        ) from None
    if total != world:
        raise RuntimeError(f"the first all-reduce between the {world} workers summed to "
                           f"{total}, not {world}: the process group is broken")


def from_rank0(value: Any, world: int) -> Any:
    """Rank 0's ``value`` on every rank (a collective: every rank calls it). For choices
    that must agree, such as which checkpoint to resume from: each rank listing a shared
    folder itself could see an older listing (NFS)."""
    if world <= 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


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
