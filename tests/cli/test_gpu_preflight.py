"""A GPU sweep on a cluster whose torch cannot use CUDA (a CPU build, or a CUDA build that
does not match the driver) ends before its first trial with one line and exit 2, instead
of failing trial after trial while the failed ones hold the GPUs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .cluster import ray_cluster

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


@pytest.fixture
def cluster_declaring_gpus(tmp_path, no_ray_running):
    """`ray start --head --num-gpus 4` on a machine with no GPU (and a CPU torch)."""
    with ray_cluster(tmp_path, [["--num-cpus=2", "--num-gpus=4"]]) as cluster:
        yield cluster.address, cluster.env


def test_gpu_sweep_with_a_cpu_torch_fails_before_any_trial(tmp_path, cluster_declaring_gpus):
    address, env = cluster_declaring_gpus
    space = tmp_path / "gpu.yaml"
    space.write_text(textwrap.dedent(SPACE))
    result = subprocess.run(
        [sys.executable, "-m", "hpsearch", "run", str(space), "--address", address],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: resources.use_gpu is true but node")
    assert "a CPU build of torch" in errors[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "runs" / "gpu" / "trials.parquet").exists()
