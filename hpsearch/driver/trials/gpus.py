"""Which GPU a trial's process trains on, what its reports say about it, and what it
gives back between trials.

Each worker trains on the GPU Ray assigned to it (:func:`cuda_device_index`), and its
reports carry that assignment (:data:`GPU_KEYS`; every worker's, joined in rank order)
into the history table.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Sequence

from hpsearch.errors import TrainableError

__all__ = ["GPU_KEYS", "cuda_device_index", "every_workers_gpus", "gpu_assignment",
           "limit_threads", "release_cached_gpu_memory", "require_cuda_if_asked",
           "reset_gpu_memory_stats", "with_every_workers_gpus"]

#: Report keys that say which GPUs a trial's workers hold (history table columns).
GPU_KEYS = ("gpu_ids", "cuda_visible_devices")


def require_cuda_if_asked(config: Mapping[str, Any]) -> None:
    """``use_gpu: true`` with a CPU build of torch (or no visible GPU) would train on the
    CPU while holding the GPUs: refuse instead."""
    if not config.get("use_gpu"):
        return
    import torch

    if not torch.cuda.is_available():
        import socket

        raise TrainableError(
            f"resources.use_gpu is true but torch {torch.__version__} sees no CUDA device on "
            f"{socket.gethostname()}. Install a CUDA build of torch on every node, or set "
            "use_gpu: false."
        )


def limit_threads(cpus: float) -> None:
    """As many torch threads as CPUs the trial holds."""
    import torch

    torch.set_num_threads(max(1, int(cpus)))


def cuda_device_index(gpu_ids: Sequence[Any], visible: str | None) -> int | None:
    """Which ``cuda:N`` is the first GPU Ray assigned to this process: its position in
    ``CUDA_VISIBLE_DEVICES``, or its own id when that variable is unset (every GPU of the
    node visible, as under ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1``). ``None``
    when Ray assigned none.

    Not the local rank: Ray Train shows every worker on a node all of that node's trial
    GPUs (``"0,1"`` for both workers), and workers that share a GPU (``gpus_per_worker:
    0.5``) are both given the same one (``"0"``: local rank 1 would ask for a ``cuda:1``
    that does not exist).

    Raises:
        ValueError: Ray assigned a GPU this process cannot see (one line naming the
            variables): training on another GPU instead would put two trials on one.

    Example:
        >>> cuda_device_index([3], "2,3"), cuda_device_index(["0"], "0"), cuda_device_index([], "0")
        (1, 0, None)
        >>> cuda_device_index([3], None)  # CUDA_VISIBLE_DEVICES unset: every GPU visible
        3
    """
    ids = [str(i) for i in gpu_ids]
    if not ids:
        return None
    if visible is None or not visible.strip():
        if ids[0].isdigit():
            return int(ids[0])
        listed: list[str] = []
    else:
        listed = [d.strip() for d in visible.split(",") if d.strip()]
        if ids[0] in listed:
            return listed.index(ids[0])
    raise ValueError(
        f"Ray assigned GPU {ids[0]} to this worker, but CUDA_VISIBLE_DEVICES is "
        f"{visible!r}, which does not list it: the process cannot train on the GPU it "
        f"holds. Something changed CUDA_VISIBLE_DEVICES after Ray set it (a trainable, an "
        f"env var in the job's runtime_env), or RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES "
        f"is set while CUDA_VISIBLE_DEVICES is not the node's full list")


def gpu_assignment() -> tuple[dict[str, str], int | str | None]:
    """The GPUs Ray assigned to this process, as report keys (:data:`GPU_KEYS`; none
    without GPUs), and the ``cuda:N`` index of the first one: ``None`` when Ray assigned
    none, or the one-line reason (a ``str``) when it is not visible, which the harness
    raises if the trial trains on a GPU (:func:`hpsearch.train.devices.training_device`)."""
    import ray

    ids = [str(i) for i in ray.get_gpu_ids()]
    if not ids:
        return {}, None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    keys = {"gpu_ids": ",".join(ids), "cuda_visible_devices": visible or ""}
    try:
        return keys, cuda_device_index(ids, visible)
    except ValueError as exc:
        return keys, str(exc)


def with_every_workers_gpus(metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rank 0's report, its :data:`GPU_KEYS` holding every worker's value in rank order,
    ``;`` between workers: ``gpu_ids`` ``"0;1"``, ``cuda_visible_devices`` ``"0,1;0,1"``."""
    first = dict(metrics[0])
    for key in GPU_KEYS:
        if any(key in m for m in metrics):
            first[key] = ";".join(str(m.get(key, "")) for m in metrics)
    return first


def every_workers_gpus(gpus: Mapping[str, str], world_size: int) -> dict[str, str]:
    """This worker's :data:`GPU_KEYS` joined with every other worker's, in rank order (a
    collective: every rank calls it)."""
    if world_size <= 1:
        return dict(gpus)
    import torch.distributed as dist

    every: list[Any] = [None] * world_size
    dist.all_gather_object(every, dict(gpus))
    return with_every_workers_gpus(every) if any(every) else {}


def release_cached_gpu_memory() -> None:
    """Give the memory a finished trial cached back to the GPU, for whoever uses it next
    (the next trial in this process, or another one at ``gpus_per_worker < 1``)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        import gc

        gc.collect()  # a model in a reference cycle holds its memory until collected
        torch.cuda.empty_cache()


def reset_gpu_memory_stats() -> None:
    """Before a trial in a process that trained before: its own peak memory counter."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
