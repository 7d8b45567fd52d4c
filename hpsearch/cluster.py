"""Connecting to Ray and fitting trials onto it.

Tune does not count Ray Train's workers, so the number of concurrent trials must be
derived here from the cluster's resources and each trial's demand; otherwise extra trials
start trainers that wait for workers forever. :func:`plan_slots` is pure and tested with
hand-made resource dicts; :func:`connect` is the only function here that touches Ray.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Mapping

from hpsearch.errors import ClusterError
from hpsearch.space.spec import Spec
from hpsearch.trainables import BUILTINS, load_trainable

# The Tune trial that drives a Ray Train run only waits on it, so it reserves no CPU (a
# fraction would make two 1-CPU workers not fit on 2 CPUs). Tune refuses an empty
# resource request, hence one byte of memory.
DRIVER_RESOURCES = {"CPU": 0, "memory": 1}


def trial_demand(spec: Spec) -> dict[str, float]:
    """CPUs and GPUs one trial holds while it runs (its driver holds none)."""
    return dict(spec.resources.per_trial())


def uses_worker_group(spec: Spec) -> bool:
    """One-worker harness trials train inside the Tune trial itself: no worker group,
    no process group, no second actor to start. Everything else is a Ray Train run."""
    if spec.resources.workers > 1:
        return True
    if spec.trainable in BUILTINS:  # all built-ins are harness workloads
        return False
    return not is_harness_workload(load_trainable(spec.trainable))


def is_harness_workload(obj: object) -> bool:
    """Harness mode (a ``Workload``) rather than a raw Ray Train loop function."""
    return hasattr(obj, "build_model") and hasattr(obj, "build_data")


def plan_slots(
    spec: Spec, cluster: Mapping[str, float], *, requested: int | None = None
) -> int:
    """How many trials can run at once on ``cluster`` (Ray resource dict).

    Args:
        spec: The validated space.
        cluster: Total resources, e.g. ``ray.cluster_resources()``.
        requested: An explicit ``max_concurrent`` (flag or file), checked against what fits.

    Raises:
        ClusterError: Not even one trial fits, or ``requested`` exceeds what fits.
    """
    demand = trial_demand(spec)
    fits = min(
        (math.floor(cluster.get(res, 0.0) / need + 1e-9) for res, need in demand.items() if need),
        default=0,
    )
    if fits < 1:
        raise ClusterError(
            f"the cluster cannot fit one trial: each trial needs {_fmt(demand)} "
            f"({spec.resources.workers} worker(s)), but the cluster has {_fmt(cluster, demand)}. "
            "Lower resources.workers / cpus_per_worker, set use_gpu: false, "
            "or connect to a bigger cluster with --address."
        )
    fits = min(fits, spec.trials.num)
    if requested is None and spec.trials.max_concurrent != "auto":
        requested = int(spec.trials.max_concurrent)
    if requested is not None:
        if requested > fits and requested <= spec.trials.num:
            raise ClusterError(
                f"max_concurrent {requested} does not fit: {fits} trial(s) of "
                f"{_fmt(demand)} fit on a cluster with {_fmt(cluster, demand)}. "
                "Use max_concurrent: auto, or a number <= "
                f"{fits}."
            )
        return max(1, min(requested, fits))
    return fits


def _fmt(resources: Mapping[str, float], only: Mapping[str, float] | None = None) -> str:
    keys = list(only) if only is not None else ["CPU", "GPU"]
    return ", ".join(f"{resources.get(k, 0):g} {k}" for k in keys)


@dataclass
class Connection:
    """A live Ray connection. ``started_local`` means hpsearch owns the instance."""

    address: str | None
    resources: dict[str, float]
    started_local: bool

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()


# Set in every process of the job. Ray Train's controller advances its state machine once
# per health-check interval (2 s by default): several intervals of pure waiting per trial
# start and end. 0.2 s costs nothing measurable and saves seconds per trial
# (benchmarks/trial_startup.py).
JOB_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


def quiet_ray_output(verbose: bool) -> None:
    """Keep Ray Tune's own tables and warnings out of hpsearch's output unless verbose."""
    if verbose:
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # legacy reporter, silent at verbose=0
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Its Ctrl-C advice ("Tuner.restore(...)") is for Tune users; hpsearch prints its own.
    logging.getLogger("ray.tune.tune").setLevel(logging.CRITICAL)
    # A failing trial's traceback goes to its error.txt; progress prints its last line and
    # that path instead of a page of Ray internals per attempt.
    logging.getLogger("ray.tune.execution.tune_controller").setLevel(logging.CRITICAL)


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not minutes: ``ray.init`` retries an unreachable GCS for a long
    time before giving up."""
    import socket
    from urllib.parse import urlsplit

    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"gcs://{address}")
    if not parts.hostname or not parts.port:
        raise ClusterError(
            f"cannot parse the Ray address {address!r}: expected HOST:PORT (e.g. "
            "10.0.0.1:6379) or auto"
        )
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ClusterError(
            f"cannot reach the Ray cluster at {address!r}: {exc.strerror or exc}. "
            "Start it with `ray up cluster.yaml` (or `ray start --head`), check the address, "
            "or leave out --address / RAY_ADDRESS to run on a local Ray instance."
        ) from None


def connect(address: str | None = None, *, verbose: bool = False) -> Connection:
    """Connect to the cluster at ``address`` (or ``$RAY_ADDRESS``), else start a local Ray.

    An already-initialised Ray (a notebook, the test session) is reused as is.

    Raises:
        ClusterError: The address cannot be reached.
    """
    import ray

    if ray.is_initialized():
        return Connection(None, dict(ray.cluster_resources()), started_local=False)
    address = address or os.environ.get("RAY_ADDRESS") or None
    quiet_ray_output(verbose)
    for key, value in JOB_ENV.items():
        os.environ.setdefault(key, value)
    kwargs = dict(
        runtime_env={"env_vars": {k: os.environ[k] for k in JOB_ENV}},
        log_to_driver=verbose,
        logging_level=logging.INFO if verbose else logging.WARNING,
        configure_logging=True,
    )
    if address in (None, "local"):
        # The dashboard hosts the state API that Ray Train's placement-group cleaner needs.
        ray.init(**kwargs)
        return Connection(None, dict(ray.cluster_resources()), started_local=True)
    if address.startswith("ray://"):
        raise ClusterError(
            f"Ray Client addresses ({address}) are not supported: Tune would run the sweep "
            "driver remotely while the tables are written here. Run hpsearch on the cluster: "
            "`ray job submit --address http://HEAD:8265 --working-dir . -- hpsearch run "
            "SPACE.yaml`, or on the head node with --address auto (docs/cluster.md)."
        )
    _check_reachable(address)
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ClusterError(
            f"cannot reach the Ray cluster at {address!r}: {last}. "
            "Start it with `ray up cluster.yaml` (or `ray start --head`), check the address, "
            "or leave out --address / RAY_ADDRESS to run on a local Ray instance."
        ) from None
    return Connection(address, dict(ray.cluster_resources()), started_local=False)
