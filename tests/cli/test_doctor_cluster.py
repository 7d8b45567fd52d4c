"""``hpsearch doctor`` on a 2-node cluster on one machine (`ray start --head` plus a second
`ray start --address`), whose second node's storage is an unwritable directory that is not
the head's: the doctor names that node, and only it, once per problem; ``run --preflight``
stops before any trial.

The second node gets its storage through the test-only ``HPSEARCH_TEST_NODE_STORAGE``
(hpsearch/driver/doctor_node.py), set in that node's `ray start` environment, which its tasks
inherit: on one machine both nodes would otherwise see the same directory."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from hpsearch.driver.cluster.doctor_node import TEST_NODE_STORAGE_ENV

pytestmark = [pytest.mark.ray, pytest.mark.slow]

RAY_START = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
             "--disable-usage-stats", "--num-cpus=1", "--num-gpus=2"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unwritable_dir(tmp_path) -> str:
    if os.geteuid() == 0:  # root writes through permission bits; sysfs refuses everyone
        return "/sys"
    path = tmp_path / "not-shared"
    path.mkdir(mode=0o555)
    return str(path)


@pytest.fixture
def two_nodes(tmp_path, no_ray_running):
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path)}
    env.pop("RAY_ADDRESS", None)
    env.pop(TEST_NODE_STORAGE_ENV, None)
    started = []

    def start(args, extra_env=None):
        proc = subprocess.Popen(RAY_START + args, env={**env, **(extra_env or {})},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        started.append(proc)
        return proc

    try:
        start(["--head", f"--port={port}", "--include-dashboard=false"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        # A second node on the same machine needs its own agent and metrics ports.
        start([f"--address=127.0.0.1:{port}", f"--dashboard-agent-listen-port={free_port()}",
               f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}",
               f"--runtime-env-agent-port={free_port()}"],
              {TEST_NODE_STORAGE_ENV: unwritable_dir(tmp_path)})
        wait = ("import ray, time\n"
                f"ray.init(address='127.0.0.1:{port}', log_to_driver=False)\n"
                "deadline = time.monotonic() + 60\n"
                "while sum(n['Alive'] for n in ray.nodes()) < 2 and time.monotonic() < deadline:\n"
                "    time.sleep(0.3)\n")
        subprocess.run([sys.executable, "-c", wait], env=env, timeout=120, check=True,
                       capture_output=True)
        yield f"127.0.0.1:{port}", env
    finally:
        for proc in reversed(started):  # `ray start --block` stops what it started
            proc.terminate()
        for proc in reversed(started):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)


def hpsearch(*args, env, cwd):
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_doctor_names_the_node_whose_storage_is_not_the_shared_one(tmp_path, two_nodes):
    address, env = two_nodes
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {**env, "HPSEARCH_SIMULATE_GPU": "1"}  # the declared GPUs are not real
    out = hpsearch("doctor", "--address", address, "--storage", str(shared), "--nodes", "2",
                   env=env, cwd=tmp_path)
    print(out.stdout)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    headers = [ln for ln in lines if re.match(r"node [0-9a-f]{8} \(", ln)]
    assert len(headers) == 2 and headers[0].endswith("  head"), headers
    head, broken = (h.split()[1] for h in headers)

    problems = lines[lines.index("problems (2):") + 1:][:2]
    assert all(p.startswith(f"  node {broken} (") for p in problems), problems
    assert ": cannot write to " in problems[0] and "(trials write checkpoints" in problems[0]
    assert (f"does not see the marker file node {head} " in problems[1]
            and "not the same filesystem" in problems[1]), problems[1]
    assert not any(ln.startswith(f"  node {head}") for ln in lines), lines
    storage_lines = [ln for ln in lines if ln.strip().startswith("storage")]
    assert "writable, sees the marker" in storage_lines[0]
    assert "(test override)" in storage_lines[1] and "NOT writable" in storage_lines[1]
    assert not list(shared.iterdir())  # the marker is gone
    # A real all-reduce between the two nodes (gloo: their GPUs are declared, not real).
    assert any(re.match(r"an all-reduce over gloo between the 2 nodes \(rooted on [0-9.]+\): "
                        r"[0-9.]+ s$", ln) for ln in lines), lines

    # run --preflight stops there, before the sweep starts.
    space = tmp_path / "space.yaml"
    space.write_text(textwrap.dedent("""\
        name: pre
        trainable: digits
        objective: {metric: val_loss, mode: min}
        params: {lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}}
        trials: {num: 1}
    """))
    run = hpsearch("run", str(space), "--address", address, "--storage", str(shared),
                   "--preflight", env=env, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith("error: hpsearch doctor found 2 problem(s); no trial was "
                                 "started:"), run.stderr
    assert len([ln for ln in run.stderr.splitlines() if ln.startswith(f"  node {broken}")]) == 2
    assert not (shared / "pre").exists()
