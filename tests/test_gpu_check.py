"""``benchmarks/gpu_check.py`` on a machine without CUDA says so and succeeds, so it can sit
in any script that runs on mixed machines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "gpu_check.py"


def test_gpu_check_without_cuda_prints_no_cuda_and_exits_0():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: gpu_check.py would run the whole check")
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("gpu_check: no CUDA here (torch ")
    assert "nothing measured" in out.stdout


def test_gpu_check_lists_what_each_check_proves_without_cuda():
    out = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    checks = [line.split("  ")[0] for line in out.stdout.splitlines()]
    assert checks == ["precision speed", "fp16 GradScaler", "peak memory reset",
                      "NCCL one rank", "checkpoint + resume", "sweep", "memory left",
                      "NCCL between nodes"]
    assert "NOT COVERED" in out.stdout
