"""``benchmarks/gpu_check.py`` on a machine without CUDA says so and succeeds, so it can sit
in any script that runs on mixed machines; the parts of it a CPU can run do what it says:
the worker that dies once (its injected failure) and ``report_share.py``'s arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


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
                      "NCCL one rank", "checkpoint + resume", "host syncs", "report share",
                      "sweep", "memory left", "NCCL between nodes"]
    assert "NOT COVERED" in out.stdout


DIES_ONCE = """
import sys
from hpsearch.train import LocalSession, train
from benchmarks._dies_once import WORKLOAD
config = {"lr": 1e-3, "epochs": 2, "n_layer": 1, "n_embd": 32, "n_head": 2, "block_size": 32,
          "batch_size": 8, "samples_per_epoch": 8 * 5, "val_samples": 8,
          "corpus_bytes": 200_000, "die_once_file": sys.argv[1], "die_at_step": 7}
session = LocalSession()
print(train(config, WORKLOAD, session).status, [r["epoch"] for r in session.reports])
"""


def test_the_injected_worker_failure_kills_its_process_once(tmp_path):
    """The first run dies at step 7 (mid-epoch 2) with no exception, as a killed worker
    does, and leaves its lr in the file; a second run, the retried trial, trains on."""
    marker = tmp_path / "died.json"
    runs = [subprocess.run([sys.executable, "-c", DIES_ONCE, str(marker)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120) for _ in range(2)]
    assert runs[0].returncode == 1 and "Traceback" not in runs[0].stderr
    assert runs[0].stdout == ""  # it never got to its end
    assert json.loads(marker.read_text())["lr"] == 1e-3
    assert runs[1].returncode == 0, runs[1].stderr
    assert runs[1].stdout.split() == ["completed", "[1,", "2]"]


def test_report_share_reads_the_shipped_shape_and_divides_an_epoch():
    sys.path.insert(0, str(ROOT))
    from benchmarks import report_share

    shape = report_share.shipped_shape()
    fixed = yaml.safe_load((ROOT / "search_spaces" / "gpu-ddp.yaml").read_text())["params"]
    assert {k: shape[k] for k in ("n_embd", "batch_size", "checkpoint_every")} == {
        k: fixed[k] for k in ("n_embd", "batch_size", "checkpoint_every")}
    assert report_share.per_rank(shape) == (fixed["batch_size"] // 4, fixed["val_samples"] / 4)
    # 10 steps of 1 s, a 1-s report and a 3-s checkpoint every third epoch: 12 s an epoch
    toy = {"samples_per_epoch": 40, "batch_size": 4, "checkpoint_every": 3}
    share = report_share.epoch_share(toy, step_s=1.0, report_s=1.0, checkpoint_s=3.0)
    assert share["epoch_s"] == pytest.approx(12.0)
    assert share["report_pct"] == pytest.approx(100 / 12)
    assert share["checkpoint_pct"] == pytest.approx(100 / 12)
    assert report_share.epoch_share({**toy, "checkpoint_every": 0}, 1.0, 1.0, 3.0)[
        "checkpoint_pct"] == 0


def test_report_share_measures_steps_reports_and_checkpoints_with_the_harness(tmp_path):
    sys.path.insert(0, str(ROOT))
    from benchmarks import report_share

    shape = {"n_layer": 1, "n_embd": 32, "n_head": 2, "block_size": 32}
    cost = report_share.costs(shape, batch=4, val=4, steps=3)
    assert cost["train_s_per_sample"] > 0 and cost["val_s_per_sample"] >= 0
    seconds, mb = report_share.checkpoint_seconds(shape, str(tmp_path))
    assert seconds > 0 and 0.1 < mb < 1  # 14K parameters, AdamW's two moments: ~0.2 MB
    assert list(tmp_path.iterdir()) == []  # the copy it made is gone
