"""Where a worker trains: its rank in the process group, its device and seeds, and the
few collectives the loop makes over them."""

from __future__ import annotations

import random
import threading
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hpsearch.train.session import Session

__all__ = ["FIRST_COLLECTIVE_S", "first_collective", "from_rank0", "gather", "global_mean",
           "peak_mem_mb", "process_group", "seed_everything", "training_device", "worker_device"]

#: How long a worker group's first collective may take before the trial fails (the
#: default of ``resources.first_collective_timeout``).
FIRST_COLLECTIVE_S = 60.0


def process_group() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def first_collective(device: torch.device, world: int, *, within_s: float = FIRST_COLLECTIVE_S
                     ) -> None:
    """The group's first collective, under a short guard: a group whose ranks cannot reach
    each other (NCCL on an interface that does not connect the nodes, InfiniBand
    misconfigured, a rank that never joins) fails here in ``within_s`` seconds with one
    line, not after the process group's timeout (``resources.collective_timeout``).

    Ray Train creates the process group without ``device_id`` (torch's one public way to
    bind a group to its GPU and connect NCCL eagerly), so NCCL builds its communicator
    lazily, inside the first collective, on the thread's current device, and that call
    blocks before any ``Work.wait(timeout)`` applies. So the one-element all-reduce runs
    in a watchdog thread, its current device set to ``device`` (the communicator is built
    on it), joined with ``within_s``: a communicator that never forms and a peer that
    never calls are both caught. On a timeout the thread is left behind, blocked; the
    caller fails the trial and its worker process is ended.

    Raises:
        RuntimeError: The collective did not complete in time, failed, or gave a wrong sum.
    """
    if world <= 1:
        return
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            if device.type == "cuda":
                torch.cuda.set_device(device)  # the current device is per thread
            ones = torch.ones(1, device=device)
            dist.all_reduce(ones)
            outcome["total"] = int(ones.item())
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="hpsearch-first-collective", daemon=True)
    thread.start()
    thread.join(within_s)
    if thread.is_alive() or "error" in outcome:
        why = "no answer" if thread.is_alive() else \
            (str(outcome["error"]).strip().splitlines() or [""])[0][:200]
        raise RuntimeError(
            f"the first all-reduce between the {world} workers did not complete within "
            f"{within_s:g} s ({why}). Across nodes this is most often NCCL on the wrong "
            "network interface: set NCCL_SOCKET_IFNAME to the one the nodes reach each other "
            "on (and NCCL_IB_DISABLE=1 without InfiniBand); `hpsearch doctor` checks it. "
            "A rank that is still importing or loading data also stalls it "
            "(resources.first_collective_timeout)")
    if outcome["total"] != world:
        raise RuntimeError(f"the first all-reduce between the {world} workers summed to "
                           f"{outcome['total']}, not {world}: the process group is broken")


def from_rank0(value: Any, world: int) -> Any:
    """Rank 0's ``value`` on every rank (a collective: every rank calls it). For choices
    that must agree, such as which checkpoint to resume from: each rank listing a shared
    folder itself could see an older listing (NFS)."""
    if world <= 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def worker_device(use_gpu: bool, index: int | str | None, local_rank: int,
                  gpu_share: float | None = None) -> torch.device:
    """The device this worker trains on, made current: ``cuda:index`` (the GPU its runner
    assigned it; its local rank when the runner assigned none), or the CPU.

    ``gpu_share`` below 1 (one-worker trials sharing a GPU) caps this process's share of
    the GPU's memory (``torch.cuda.set_per_process_memory_fraction``): a trial that
    outgrows its share fails with an out-of-memory error instead of pushing out the
    trial it shares the GPU with.

    Raises:
        RuntimeError: The assigned GPU is not visible to this process (``index`` is the
            runner's reason), or its index is past the GPUs torch sees.
    """
    if not (use_gpu and torch.cuda.is_available()):
        return torch.device("cpu")
    if isinstance(index, str):
        raise RuntimeError(index)
    ordinal = local_rank if index is None else index
    count = torch.cuda.device_count()
    if ordinal >= count:
        import os

        raise RuntimeError(
            f"this worker should train on cuda:{ordinal} "
            f"({'its local rank' if index is None else 'the GPU Ray assigned it'}), but torch "
            f"sees {count} GPU(s) (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}, "
            "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES')!r})")
    device = torch.device("cuda", ordinal)
    torch.cuda.set_device(device)
    share = gpu_share if gpu_share is not None and 0 < gpu_share < 1 else 1.0
    torch.cuda.set_per_process_memory_fraction(share, device)
    return device


def training_device(use_gpu: bool, session: Session) -> torch.device:
    """:func:`worker_device` from what the session knows (``device_index``, set by Ray's
    sessions, and ``gpu_share``); the peak memory counters reset for this run."""
    device = worker_device(use_gpu, getattr(session, "device_index", None), session.local_rank,
                           getattr(session, "gpu_share", None))
    if device.type == "cuda":
        # peak_mem_mb is this run's own, also in a process that trained before (Tune reuses
        # the actors of one-worker trials).
        torch.cuda.reset_peak_memory_stats(device)
    return device


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


def peak_mem_mb(device: torch.device, world: int = 1) -> float | None:
    """The run's peak of GPU memory reserved by torch's caching allocator, in MiB: the most
    of any rank when ``world > 1`` (a collective then: every rank calls it), ``None`` on
    the CPU.

    Reserved, not allocated: what the allocator holds from the GPU, fragmentation
    included, which is what decides whether a trial fits. It does not count memory
    outside the allocator: the CUDA context (a few hundred MiB per process), NCCL's
    buffers, cuBLAS/cuDNN workspaces allocated by the libraries themselves, or other
    processes on the GPU. A memory limit on it should leave that much room.
    """
    if device.type != "cuda":
        return None
    peak = torch.cuda.max_memory_reserved(device) / 2**20
    if world > 1:
        box = torch.tensor([peak], dtype=torch.float64, device=device)
        dist.all_reduce(box, op=dist.ReduceOp.MAX)
        peak = float(box.item())
    return peak
