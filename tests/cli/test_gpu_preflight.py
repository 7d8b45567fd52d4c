"""A GPU sweep on a cluster whose torch cannot use CUDA (a CPU build, or a CUDA build that
does not match the driver) ends before its first trial with one line and exit 2, instead
of failing trial after trial while the failed ones hold the GPUs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPACE = """\
    name: gpu
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
    scheduler: {type: fifo, max_t: 2}
    trials: {num: 4}
    resources: {workers: 2, use_gpu: true, cpus_per_worker: 0.5}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster_declaring_gpus(tmp_path, no_ray_running):
    """`ray start --head --num-gpus 4` on a machine with no GPU (and a CPU torch)."""
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path)}
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
         f"--port={port}", "--num-cpus=2", "--num-gpus=4", "--include-dashboard=false",
         "--disable-usage-stats"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.5)
    time.sleep(3)  # the raylet registers after the GCS listens
    try:
        yield f"127.0.0.1:{port}", env
    finally:
        head.terminate()  # `ray start --block` stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, 9)


def test_gpu_sweep_with_a_cpu_torch_fails_before_any_trial(tmp_path, cluster_declaring_gpus):
    address, env = cluster_declaring_gpus
    space = tmp_path / "gpu.yaml"
    space.write_text(textwrap.dedent(SPACE))
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "hpsearch", "run", str(space), "--address", address],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )
    took = time.monotonic() - start
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: resources.use_gpu is true but node")
    assert "a CPU build of torch" in errors[0] and "Traceback" not in result.stderr
    assert took < 60, took
    assert not (tmp_path / "runs" / "gpu" / "trials.parquet").exists()
