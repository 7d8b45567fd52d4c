"""What the workers of a warm group run (:mod:`hpsearch.driver.trials.pool`): trial
after trial, until their host shuts the group down.

As the group starts, before any other collective, every worker imports the trainable,
takes its device and runs the group's first collective under the short guard
(:func:`~hpsearch.train.devices.first_collective`, ``resources.first_collective_timeout``),
which also builds NCCL's communicator on that device. A failed start is counted by the
host, which gives the group up after the second.
"""

from __future__ import annotations

import traceback
from typing import Any

from hpsearch.driver.trials.gpus import (
    release_cached_gpu_memory,
    require_cuda_if_asked,
    reset_gpu_memory_stats,
)
from hpsearch.driver.trials.runners import trainable_of
from hpsearch.driver.trials.sessions import TrialStopped, WarmSession

__all__ = ["warm_worker_loop"]


def warm_worker_loop(payload: dict[str, Any]) -> None:
    """``train_loop_per_worker`` of a warm group: train trial after trial (module doc)."""
    import ray
    import ray.train

    from hpsearch.driver.trials.gpus import gpu_assignment
    from hpsearch.train.devices import first_collective, from_rank0, worker_device
    from hpsearch.train.loop import train

    host = payload["host"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    if ray.get(host.given_up.remote()):
        return
    # Before the group's first collective: the trainable's import (a slow one on one rank
    # stalls the others), the device this worker trains on, then the collective under
    # the short guard, which also builds NCCL's communicator on that device.
    try:
        trainable = trainable_of(payload["trainable"])
        device = worker_device(payload.get("use_gpu", False), gpu_assignment()[1],
                               ctx.get_local_rank())
        first_collective(device, world, within_s=payload["first_collective_s"])
    except Exception as exc:  # noqa: BLE001 - counted by the host, then Ray Train's to handle
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        ray.get(host.group_failed.remote(f"the worker group could not start (rank {rank}): "
                                         f"{line}"), timeout=10)
        raise
    after = -1
    while True:
        msg = from_rank0(ray.get(host.next_job.remote(after)) if rank == 0 else None, world)
        if msg.get("shutdown"):
            return
        if msg.get("idle"):
            continue
        job = msg["job"]
        reset_gpu_memory_stats()
        session = WarmSession(host, job, payload["sweep"], payload["objective"],
                              keep=payload["keep"],
                              first_collective_s=payload["first_collective_s"])
        try:
            require_cuda_if_asked(job["config"])
            train(job["config"], trainable, session)
        except TrialStopped:
            pass
        except BaseException:
            # Ray Train restarts the group; the trial resumes, or fails past its limit.
            try:
                ray.get(host.job_error.remote(job["seq"], traceback.format_exc(limit=8)),
                        timeout=10)
            finally:
                raise
        if rank == 0:
            ray.get(host.finish.remote(job["seq"]))
        after = job["seq"]
        release_cached_gpu_memory()
