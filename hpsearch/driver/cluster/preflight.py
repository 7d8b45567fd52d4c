"""Checks on the cluster's nodes before the first trial starts.

A GPU sweep whose nodes cannot run CUDA (a CPU build of torch, a CUDA build that does not
match the driver) would otherwise fail one trial at a time, each holding its GPUs while it
fails. :func:`require_cuda_on_gpu_nodes` asks every GPU node instead, once, in seconds.
``hpsearch doctor`` (:mod:`hpsearch.driver.cluster.doctor`) checks much more, on request.

``HPSEARCH_SIMULATE_GPU=1`` is a switch for tests only: on a Ray cluster that declares
GPUs it has not got (``ray start --num-gpus 4``), trials still reserve and are assigned
GPUs, but train on the CPU (over gloo when several workers), and this check is skipped.
It is read where the sweep's driver runs, and every run it affects says so
(:func:`say_gpu_simulation`).
"""

from __future__ import annotations

import os
from typing import Any

from hpsearch.errors import ClusterError
from hpsearch.space.spec import Spec

__all__ = ["SIMULATE_GPU_ENV", "cuda_report", "require_cuda_on_gpu_nodes", "say_gpu_simulation",
           "simulating_gpus"]

#: Test-only: trials train on the CPU while Ray still reserves and assigns GPUs.
SIMULATE_GPU_ENV = "HPSEARCH_SIMULATE_GPU"


def simulating_gpus() -> bool:
    """Whether ``HPSEARCH_SIMULATE_GPU=1`` is set (tests of GPU scheduling on CPUs)."""
    return os.environ.get(SIMULATE_GPU_ENV) == "1"


def say_gpu_simulation(spec: Spec, stream: Any) -> bool:
    """Whether this run of ``spec`` simulates its GPUs (a ``use_gpu`` sweep under
    ``HPSEARCH_SIMULATE_GPU=1``); if so, one line on ``stream`` says it. The run's record
    notes it in the manifest (:meth:`SweepRecord.begin`)."""
    if not (spec.resources.use_gpu and simulating_gpus()):
        return False
    print(f"  SIMULATED GPUs ({SIMULATE_GPU_ENV}=1, for tests): Ray reserves and assigns "
          "GPUs, the trials train on the CPU", file=stream, flush=True)
    return True


def cuda_report(need_nccl: bool) -> dict[str, Any]:
    """What torch on this process's node can do (runs inside a Ray task)."""
    import socket

    import torch
    import torch.distributed as dist

    report: dict[str, Any] = {"host": socket.gethostname(), "torch": torch.__version__,
                              "cuda_build": torch.version.cuda, "cuda": False,
                              "devices": 0, "nccl": None, "error": None}
    try:
        report["cuda"] = bool(torch.cuda.is_available())
        report["devices"] = torch.cuda.device_count() if report["cuda"] else 0
    except Exception as exc:  # noqa: BLE001 - a broken driver raises instead of saying no
        report["error"] = f"{type(exc).__name__}: {exc}"
    if need_nccl:
        report["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
    return report


def require_cuda_on_gpu_nodes(spec: Spec, *, timeout_s: float = 120.0) -> None:
    """Refuse a ``use_gpu`` sweep, before any trial, if a GPU node's torch cannot use CUDA
    (or, for several workers, lacks NCCL). Checked on the nodes, not here: the driver may
    be a CPU-only machine submitting to a GPU cluster.

    Raises:
        ClusterError: One line naming the node and what its torch lacks.
    """
    res = spec.resources
    if not res.use_gpu or simulating_gpus():
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(cuda_report)
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU")]
    refs = {
        n["NodeManagerAddress"]: probe.options(
            num_cpus=0, num_gpus=min(res.gpus_per_worker or 1, n["Resources"]["GPU"]),
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
        ).remote(res.workers > 1)
        for n in nodes
    }
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    for address, ref in refs.items():
        if ref not in ready:
            ray.cancel(ref, force=True)
            continue  # its GPUs are busy (another sweep): the trials will find out
        report = ray.get(ref)
        where = f"node {report['host']} ({address})"
        if report["error"] or not report["cuda"]:
            build = (f"a CPU build of torch ({report['torch']})" if not report["cuda_build"]
                     else f"torch {report['torch']} (CUDA {report['cuda_build']}) cannot use "
                          f"its GPUs{': ' + report['error'] if report['error'] else ''}")
            raise ClusterError(
                f"resources.use_gpu is true but {where} has {build}. Install a CUDA build of "
                "torch that matches the NVIDIA driver on every GPU node (`hpsearch doctor` "
                "checks them all), or set use_gpu: false."
            )
        if report["nccl"] is False:
            raise ClusterError(
                f"resources.workers is {res.workers} on GPUs but torch {report['torch']} on "
                f"{where} has no NCCL. Install a CUDA build of torch with NCCL, or use one "
                "worker per trial."
            )
