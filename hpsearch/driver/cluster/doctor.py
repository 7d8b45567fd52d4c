"""``hpsearch doctor``: check every node of a cluster before a sweep spends GPU-hours on it.

The failures that waste a night on bare metal happen before any training: a node whose
shared storage is not mounted, a torch CUDA build the NVIDIA driver cannot run, NCCL
talking over an interface that does not connect the nodes, a node that never joined.
:func:`run_doctor` asks every node at once, with one small Ray task each (no CPU or GPU
reserved, so it also runs beside a sweep; :mod:`hpsearch.driver.cluster.doctor_node`), and
:func:`~hpsearch.driver.cluster.doctor_rules.diagnose` turns the answers into one line per
problem. Nothing is changed on the nodes except a marker file, written to the storage by
one node, looked for by all, and then removed.

Per node: Python, Ray, torch and hpsearch versions; CUDA, the GPUs, the driver's CUDA
version against torch's; NCCL and the network interface it would use; the storage
(exists, its filesystem, writable, the same files as the other nodes, free space); its
clock against the head's; Ray's token authentication. Between the nodes: one real
all-reduce, over NCCL when every node has a GPU, else gloo
(:mod:`hpsearch.driver.cluster.doctor_collective`).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from hpsearch.driver.cluster.doctor_collective import all_reduce_between_nodes
from hpsearch.driver.cluster.doctor_node import (
    MARKER_PREFIX,
    TEST_NODE_STORAGE_ENV,
    node_facts,
    now,
    read_marker,
    remove_marker,
    write_marker,
)
from hpsearch.driver.cluster.doctor_rules import (
    CLOCK_SKEW_LIMIT_S,
    MIN_FREE_BYTES,
    diagnose,
    human_size,
    nccl_interfaces,
    node_label,
)
from hpsearch.errors import ClusterError

# The names this module had before it was split keep working from here.
__all__ = ["CLOCK_SKEW_LIMIT_S", "MIN_FREE_BYTES", "TEST_NODE_STORAGE_ENV", "DoctorReport",
           "diagnose", "nccl_interfaces", "node_facts", "require_healthy_cluster", "run_doctor"]

# --- the report -------------------------------------------------------------------------


@dataclass
class DoctorReport:
    """What :func:`run_doctor` found: each node's facts, problems, warnings."""

    nodes: list[dict[str, Any]]
    storage: str | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    simulate_gpu: bool = False
    #: The all-reduce between the nodes, when it worked (``None``: one node, or it failed).
    collective: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        out = [f"hpsearch doctor: {len(self.nodes)} node(s)"
               + (f", storage {self.storage}" if self.storage else ", no --storage given")
               + (" [SIMULATED GPUs: CUDA and NCCL not required]" if self.simulate_gpu else "")]
        for node in self.nodes:
            out.append(node_label(node) + ("  head" if node.get("head") else ""))
            out += ["  " + line for line in _node_lines(node)]
        if self.collective:
            out.append(self.collective)
        for title, items in (("problems", self.problems), ("warnings", self.warnings)):
            if items:
                out.append(f"{title} ({len(items)}):")
                out += [f"  {item}" for item in items]
        if self.ok:
            out.append("no problems found")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"storage": self.storage, "nodes": self.nodes, "problems": self.problems,
                "warnings": self.warnings, "simulate_gpu": self.simulate_gpu,
                "collective": self.collective}


def _node_lines(node: Mapping[str, Any]) -> list[str]:
    torch_ = node.get("torch") or {}
    nvidia = node.get("nvidia") or {}
    lines = [f"versions  Python {node.get('python')}, Ray {node.get('ray')}, torch "
             f"{torch_.get('version') or '-'}, hpsearch {node.get('hpsearch')}"]
    devices = torch_.get("devices") or []
    gpus = (f"{len(devices)} x {devices[0]}" if devices and len(set(devices)) == 1
            else ", ".join(devices) or "none visible to torch")
    lines.append(f"gpus      Ray declares {node.get('ray_gpus') or 0:g}; {gpus}; torch CUDA "
                 f"{torch_.get('cuda_build') or '-'}, driver {nvidia.get('driver') or '-'} "
                 f"(CUDA {nvidia.get('driver_cuda') or '-'})")
    net = node.get("net") or {}
    chosen = nccl_interfaces(net.get("interfaces") or {},
                             (net.get("env") or {}).get("NCCL_SOCKET_IFNAME"))
    settings = " ".join(f"{k}={v}" for k, v in (net.get("env") or {}).items()) or "no NCCL_* set"
    lines.append(f"nccl      {torch_.get('nccl_version') or ('yes' if torch_.get('nccl') else 'no')}"
                 f"; sockets via {', '.join(chosen) or '-'}; Ray on "
                 f"{net.get('ray_interface') or '?'} ({node.get('ip')}); InfiniBand "
                 f"{', '.join(net.get('ib_hcas') or []) or 'none'}; {settings}")
    facts = node.get("storage")
    if facts is not None:
        state = [facts["path"] + (" (test override)" if node.get("storage_overridden") else "")]
        if not facts["exists"]:
            state.append(f"does not exist, checked {facts['checked']}")
        if facts["error"] != "is not a directory":
            state.append(f"{facts['fstype'] or '?'} at {facts['mount']}")
            state.append("writable" if facts["writable"] else "NOT writable")
            if facts.get("shared") is not None:
                state.append("sees the marker" if facts["shared"] else "does NOT see the marker")
            if facts.get("free") is not None:
                state.append(f"{human_size(facts['free'])} free")
        else:
            state.append("not a directory")
        lines.append("storage   " + ", ".join(state))
    if node.get("clock_offset_s") is not None:
        lines.append(f"clock     {node['clock_offset_s']:+.3f} s vs the head node")
    auth = node.get("auth") or {}
    token = (f"token {auth['fingerprint']} from {auth['token']}"
             + (f" (mode {auth['file_mode']})" if auth.get("file_mode") else "")
             if auth.get("fingerprint") else "no token")
    lines.append(f"auth      RAY_AUTH_MODE={auth.get('mode') or '(unset)'}, {token}")
    return lines


# --- the driver's side ------------------------------------------------------------------


def run_doctor(*, address: str | None = None, storage: str | None = None,
               expected_nodes: int | None = None, timeout_s: float = 120.0) -> DoctorReport:
    """Check every alive node of the cluster at ``address`` (see the module doc).

    Args:
        address: Ray address; ``None``: ``$RAY_ADDRESS``, a cluster started on this machine,
            else a local instance.
        storage: The sweeps' storage directory, checked on every node.
        expected_nodes: How many nodes should be alive.
        timeout_s: How long a node may take to answer.

    Raises:
        ClusterError: The cluster cannot be reached.
    """
    import ray

    from hpsearch.driver.cluster.connect import connect
    from hpsearch.driver.cluster.preflight import simulating_gpus

    owned = not ray.is_initialized()
    connect(address)
    try:
        nodes, dead, problems = _ask_every_node(storage, timeout_s)
        if storage:
            problems += _compare_storage(nodes, timeout_s)
        _measure_clocks(nodes, timeout_s)
        collective, broken = all_reduce_between_nodes(nodes)
        problems += [broken] if broken else []
    finally:
        if owned:
            ray.shutdown()
    driver = {"python": platform.python_version(), "ray": ray.__version__,
              "hpsearch": _hpsearch_version()}
    simulate = simulating_gpus()
    found, warnings = diagnose(nodes, driver=driver, storage=storage, simulate_gpu=simulate,
                               expected_nodes=expected_nodes, dead=dead)
    return DoctorReport(nodes, storage, problems + found, warnings, simulate, collective)


def require_healthy_cluster(*, address: str | None, storage: str | None, stream: Any) -> None:
    """``hpsearch run --preflight``: run the doctor, print its report, and refuse to start
    the sweep if it found a problem.

    Raises:
        ClusterError: One line per problem.
    """
    report = run_doctor(address=address, storage=storage)
    for line in report.lines():
        print(line, file=stream)
    stream.flush()
    if not report.ok:
        raise ClusterError(f"hpsearch doctor found {len(report.problems)} problem(s); no trial "
                           "was started:\n" + "\n".join(f"  {p}" for p in report.problems))


def _hpsearch_version() -> str:
    import hpsearch

    return hpsearch.__version__


def _on(node_id: str, **options: Any) -> dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"num_cpus": 0, "scheduling_strategy":
            NodeAffinitySchedulingStrategy(node_id, soft=False), **options}


def _ask_every_node(storage: str | None, timeout_s: float):
    import ray

    listed = ray.nodes()
    alive = [n for n in listed if n.get("Alive")]
    dead = [f"node {n['NodeID'][:8]} ({n.get('NodeManagerHostname')}, "
            f"{n.get('NodeManagerAddress')})" for n in listed if not n.get("Alive")]
    facts = ray.remote(node_facts)
    refs = {n["NodeID"]: facts.options(**_on(n["NodeID"])).remote(
        os.path.abspath(storage) if storage else None) for n in alive}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    nodes, problems = [], []
    for n in alive:
        ref = refs[n["NodeID"]]
        resources = n.get("Resources", {})
        meta = {"node_id": n["NodeID"], "head": "node:__internal_head__" in resources,
                "ray_gpus": resources.get("GPU", 0.0)}
        if ref not in ready:
            ray.cancel(ref, force=True)
            problems.append(f"node {n['NodeID'][:8]} ({n.get('NodeManagerHostname')}, "
                            f"{n.get('NodeManagerAddress')}) did not answer within "
                            f"{timeout_s:g} s")
            continue
        try:
            nodes.append({**meta, **ray.get(ref)})
        except Exception as exc:  # noqa: BLE001 - one node's failure is one line
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            problems.append(f"node {n['NodeID'][:8]} ({n.get('NodeManagerAddress')}): the check "
                            f"failed: {last}")
    nodes.sort(key=lambda node: (not node["head"], node["node_id"]))
    return nodes, dead, problems


def _compare_storage(nodes: list[dict[str, Any]], timeout_s: float) -> list[str]:
    """One node writes a marker to its storage; every node looks for it at the same path.
    Returns the problem, if the comparison itself failed."""
    writers = [n for n in nodes if n.get("storage") and n["storage"]["writable"]]
    if len(nodes) < 2 or not writers:
        return []
    try:
        _marker_round(nodes, writers[0], timeout_s)
    except Exception as exc:  # noqa: BLE001 - a node lost halfway: one line
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        return [f"comparing the storage between nodes failed: {last}"]
    return []


def _marker_round(nodes: list[dict[str, Any]], writer: dict[str, Any], timeout_s: float) -> None:
    import secrets

    import ray

    directory = writer["storage"]["checked"]
    name = f"{MARKER_PREFIX}{secrets.token_hex(8)}"
    content = f"written by node {writer['node_id']} at {time.time()}\n"
    ray.get(ray.remote(write_marker).options(**_on(writer["node_id"])).remote(
        directory, name, content), timeout=timeout_s)
    try:
        # Each node looks where it would write: the same path, unless a test overrides it.
        reader = ray.remote(read_marker)
        seen = ray.get([reader.options(**_on(n["node_id"])).remote(
            os.path.join(n["storage"]["checked"] if n.get("storage") else directory, name))
            for n in nodes], timeout=timeout_s)
    finally:
        ray.get(ray.remote(remove_marker).options(**_on(writer["node_id"])).remote(
            directory, name), timeout=timeout_s)
    for node, text in zip(nodes, seen):
        if node.get("storage") is not None:
            node["storage"]["shared"] = text == content
            node["storage"]["writer"] = node_label(writer)


def _measure_clocks(nodes: list[dict[str, Any]], timeout_s: float, rounds: int = 3) -> None:
    """Each node's clock against this process's, from the quickest of a few round trips,
    then against the head node's."""
    import ray

    clock = ray.remote(now)
    for node in nodes:
        best = None
        for _ in range(rounds):
            sent = time.time()
            theirs = ray.get(clock.options(**_on(node["node_id"])).remote(), timeout=timeout_s)
            back = time.time()
            if best is None or back - sent < best[0]:
                best = (back - sent, theirs - (sent + back) / 2)
        node["clock_rtt_s"], node["clock_offset_s"] = best
    head = next((n for n in nodes if n.get("head")), nodes[0] if nodes else None)
    if head is not None:
        base = head["clock_offset_s"]
        for node in nodes:
            node["clock_offset_s"] -= base
