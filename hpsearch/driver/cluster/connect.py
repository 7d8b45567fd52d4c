"""Connecting to Ray: a cluster at an address, or a local instance hpsearch starts.

:func:`connect` is the only way hpsearch reaches Ray; it fails in seconds with one clear
line when the cluster cannot be reached, and keeps Ray's own output quiet unless asked.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from types import MappingProxyType

from hpsearch.errors import ClusterError

__all__ = ["Connection", "JOB_ENV", "NAMESPACE", "connect", "quiet_ray_output"]

#: The Ray namespace of hpsearch's named actors (the cluster ledger, warm-group pools).
NAMESPACE = "hpsearch"


@dataclass
class Connection:
    """A live Ray connection. ``started_local`` means hpsearch owns the instance."""

    address: str | None
    resources: dict[str, float]
    started_local: bool

    @property
    def nodes(self) -> list[dict[str, float]]:
        """Each live node's total resources (the plan fits trials node by node)."""
        return node_resources()

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def free_port() -> int:
    """A TCP port nothing on this node listens on now (a process group's root)."""
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_resources() -> list[dict[str, float]]:
    """The total resources of each live node of the connected cluster."""
    import ray

    return [dict(n.get("Resources", {})) for n in ray.nodes() if n.get("Alive")]


# Set in every process of the job. Ray Train's controller advances its state machine once
# per health-check interval (2 s by default): several intervals of pure waiting per trial
# start and end. 0.2 s costs nothing measurable and saves seconds per trial
# (benchmarks/trial_startup.py).
JOB_ENV = MappingProxyType({"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"})


def quiet_ray_output(verbose: bool) -> None:
    """Keep Ray Tune's own tables and warnings out of hpsearch's output unless verbose."""
    from hpsearch.driver.internals import quiet_token_notice

    if verbose:
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # legacy reporter, silent at verbose=0
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Its Ctrl-C advice ("Tuner.restore(...)") is for Tune users; hpsearch prints its own.
    logging.getLogger("ray.tune.tune").setLevel(logging.CRITICAL)
    # A failing trial's traceback goes to its error.txt; progress prints its last line and
    # that path instead of a page of Ray internals per attempt.
    logging.getLogger("ray.tune.execution.tune_controller").setLevel(logging.CRITICAL)
    # "Failed to fetch metrics" for trials that never ran (a stalled or stopped sweep):
    # the trial tables say what ran.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    quiet_token_notice()


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


def connect(address: str | None = None, *, verbose: bool = False,
            num_gpus: float | None = None) -> Connection:
    """Connect to the cluster at ``address`` (or ``$RAY_ADDRESS``), else start a local Ray.

    An already-initialised Ray (a notebook, the test session) is reused as is.

    Args:
        address: ``HOST:PORT``, ``auto``, or ``None`` / ``local`` for a local instance.
        verbose: Let Ray's own logs through.
        num_gpus: GPUs a *local* instance declares (default: what it detects). Tests and
            ``HPSEARCH_SIMULATE_GPU`` declare GPUs on machines that have none.

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
    if address is None:
        from hpsearch.driver.internals import running_local_cluster

        # A cluster started here with `ray start` is joined, as `ray.init()` would; a
        # stale record of one (its head is gone) must not make us wait for it.
        address = running_local_cluster() if num_gpus is None else None
        if address is not None:
            ray.init(address=address, **kwargs)
            return Connection(address, dict(ray.cluster_resources()), started_local=False)
    if address in (None, "local"):
        # The dashboard hosts the state API that Ray Train's placement-group cleaner needs.
        ray.init(address="local", **kwargs,
                 **({"num_gpus": num_gpus} if num_gpus is not None else {}))
        return Connection(None, dict(ray.cluster_resources()), started_local=True)
    if address.startswith("ray://"):
        raise ClusterError(
            f"Ray Client addresses ({address}) are not supported: Tune would run the sweep "
            "driver remotely while the tables are written here. Run hpsearch on the cluster: "
            "`ray job submit --address http://HEAD:8265 --working-dir . -- hpsearch run "
            "SPACE.yaml`, or on the head node with --address auto (docs/cluster.md)."
        )
    _check_reachable(address)
    if address != "auto":
        from hpsearch.driver.internals import gcs_auth_problem

        refused = gcs_auth_problem(address)
        if refused:
            raise ClusterError(explain_connection_error(address, RuntimeError(refused)))
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(explain_connection_error(address, exc)) from None
    return Connection(address, dict(ray.cluster_resources()), started_local=False)


_AUTH_SIGNS = ("InvalidAuthToken", "UNAUTHENTICATED", "Unauthenticated", "auth token",
               "authentication token", "401", "403", "Unauthorized", "Forbidden")


def explain_connection_error(address: str, exc: BaseException, *, jobs_api: bool = False) -> str:
    """One line for a failed connection, saying what to do. A token problem (the cluster
    uses token authentication and this client sends none, or the wrong one) reads like an
    unreachable cluster in Ray's own message; it is named here."""
    text = str(exc).strip()
    last = text.splitlines()[-1] if text else type(exc).__name__
    if any(sign in text for sign in _AUTH_SIGNS):
        if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
            return (f"the Ray cluster at {address!r} requires token authentication and this "
                    "client sends no token: `export RAY_AUTH_MODE=token` and put the "
                    "cluster's token in ~/.ray/auth_token (or RAY_AUTH_TOKEN); see "
                    "docs/cluster.md, Token authentication")
        return (f"the Ray cluster at {address!r} refused this client's token ({last}): copy "
                "the cluster's token from the head node's ~/.ray/auth_token; see "
                "docs/cluster.md, Token authentication")
    what = "Ray Jobs API" if jobs_api else "Ray cluster"
    return (f"cannot reach the {what} at {address!r}: {last}. Start it with `ray up "
            "cluster.yaml` (or `ray start --head`), check the address, or leave out "
            "--address / RAY_ADDRESS to run on a local Ray instance.")
