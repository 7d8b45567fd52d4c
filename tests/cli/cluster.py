"""A Ray cluster of several nodes on this one machine, as `ray up` would start one: a head
(`ray start --head`) and worker nodes (`ray start --address`), each with its own declared
resources. Every node is a `ray start --block` process this test owns and kills (never
`ray stop`, which would stop anyone's Ray on the machine). Every process of the cluster,
down to a Ray Job's driver, carries the cluster's own ``HPSEARCH_TEST_CLUSTER`` variable,
which is how :meth:`Cluster.kill` finds them all.

Starting a cluster costs 10-30 s on 2 cores and stopping one with a dashboard gracefully
another ~30 s, so tests that can share one do (a module-scoped fixture), and a cluster is
killed, not stopped, when its test is done: no test's data lives in it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    address: str
    env: dict[str, str]
    nodes: list[subprocess.Popen] = field(default_factory=list)
    dashboard_port: int | None = None

    def kill(self) -> None:
        """Every node at once, as a power cut would: SIGKILL to each node's processes and
        to every process that carries this cluster's mark (workers, actors, a Ray Job's
        driver and its watcher, which Ray starts in sessions of their own)."""
        for node in self.nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while (left := self.processes()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        for node in self.nodes:
            node.wait()
        assert not self.processes(), "a process of the cluster outlived the kill"

    def processes(self) -> list[int]:
        """The live processes that carry this cluster's mark."""
        mark = f"HPSEARCH_TEST_CLUSTER={self.env['HPSEARCH_TEST_CLUSTER']}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:  # gone, or not ours to read
                continue
        return found


def _ray_start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
         "--disable-usage-stats", *args],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _wait_for_nodes(address: str, env: dict[str, str], count: int, timeout: float = 90) -> None:
    code = ("import ray, sys, time\n"
            f"ray.init(address={address!r})\n"
            f"deadline = time.time() + {timeout}\n"
            f"while sum(n['Alive'] for n in ray.nodes()) < {count} and time.time() < deadline:\n"
            "    time.sleep(0.5)\n"
            f"sys.exit(0 if sum(n['Alive'] for n in ray.nodes()) >= {count} else 1)\n")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=timeout + 60)
    assert result.returncode == 0, result.stderr[-2000:]


@contextlib.contextmanager
def ray_cluster(home: Path, nodes: list[list[str]], *, dashboard: bool = False,
                port: int | None = None, token: bool = False,
                node_env: dict[int, dict[str, str]] | None = None) -> Iterator[Cluster]:
    """``nodes[0]`` are the head's extra `ray start` arguments (``--num-cpus=2``...), the
    others the worker nodes'; ``node_env[i]`` is added to node ``i``'s environment only
    (its tasks inherit it). HOME is ``home``, so no token of the user's is read or
    written. Token auth is off (a test cluster on loopback), or on with ``token``: a token
    generated into ``home/.ray/auth_token`` and ``RAY_AUTH_MODE=token`` in ``env``."""
    port = port or free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HOME": str(home),
           "HPSEARCH_TEST_CLUSTER": uuid.uuid4().hex}
    env.pop("RAY_ADDRESS", None)  # the tests' "local" is for drivers, not for nodes
    if token:
        env["RAY_AUTH_MODE"] = "token"
        subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "get-auth-token",
                        "--generate"], env=env, check=True, capture_output=True, timeout=60)
        # Readable by its owner only, as docs/cluster.md has it (`hpsearch doctor` warns
        # about a token others can read).
        (home / ".ray" / "auth_token").chmod(0o600)
    address = f"127.0.0.1:{port}"
    cluster = Cluster(address, env)
    # Each worker node gets a temp dir of its own, as a machine of its own would have: two
    # nodes sharing one session folder share its runtime-env folder, and the second
    # node's agent re-unpacks a Ray Job's working_dir there, deleting it from under the
    # job's driver, whose working directory it is.
    node_dirs = [tempfile.mkdtemp(prefix="raynode") for _ in nodes[1:]]
    head_args = ["--head", f"--port={port}", f"--include-dashboard={str(dashboard).lower()}"]
    if dashboard:
        cluster.dashboard_port = free_port()
        head_args.append(f"--dashboard-port={cluster.dashboard_port}")
    try:
        node_env = node_env or {}
        cluster.nodes.append(_ray_start(head_args + nodes[0], {**env, **node_env.get(0, {})}))
        _wait_for_nodes(address, env, 1)
        for i, (extra, temp) in enumerate(zip(nodes[1:], node_dirs), start=1):
            # A second node on the same machine needs agent and metrics ports of its own.
            ports = [f"--dashboard-agent-listen-port={free_port()}",
                     f"--dashboard-agent-grpc-port={free_port()}",
                     f"--metrics-export-port={free_port()}",
                     f"--runtime-env-agent-port={free_port()}"]
            cluster.nodes.append(_ray_start([f"--address={address}", f"--temp-dir={temp}",
                                             *ports, *extra], {**env, **node_env.get(i, {})}))
        _wait_for_nodes(address, env, len(nodes))
        yield cluster
    finally:
        cluster.kill()
        for temp in node_dirs:
            shutil.rmtree(temp, ignore_errors=True)
