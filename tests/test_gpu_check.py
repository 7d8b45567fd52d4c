"""``benchmarks/gpu_check.py`` on a machine without CUDA says so and exits 2 (nothing
measured); its verdicts cannot pass vacuously (the exit status from synthetic rows); the
parts of it a CPU can run do what it says: the worker that dies once (its injected
failure) and ``report_share.py``'s arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def test_gpu_check_without_cuda_prints_no_cuda_and_exits_2():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: gpu_check.py would run the whole check")
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stdout.startswith("gpu_check: no CUDA here (torch ")
    assert "nothing measured" in out.stdout


def test_gpu_check_lists_what_each_check_proves_and_what_fails_it_without_cuda():
    out = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    checks = [line.split("  ")[0] for line in lines[::2]]
    assert checks == ["precision", "goal", "fp16 GradScaler", "peak memory reset",
                      "GPU utilisation", "NCCL one rank", "checkpoint + resume", "host syncs", "report share",
                      "sweep 1 worker", "sweep GPU ids", "sweep peak reset", "sweep 2 workers",
                      "memory left", "NCCL between nodes"]
    fails = [line.strip() for line in lines[1::2]]
    # every row a single machine can cover has a way to FAIL
    assert all(f.startswith("FAIL: ") for f in fails[:-1]), fails
    assert "never covered" in fails[-1]


def gpu_check():
    sys.path.insert(0, str(ROOT))
    from benchmarks import gpu_check

    return gpu_check


def test_every_covered_row_passing_exits_0_and_a_failure_or_a_gap_exits_1():
    g = gpu_check()
    ok = [g.passed("a"), g.passed("b"), g.uncovered("between nodes", expected=False)]
    assert g.exit_status(ok)[0] == 0
    assert g.exit_status([*ok, g.failed("c")])[0] == 1
    assert g.exit_status([*ok, g.failed("c")], allow_partial=True)[0] == 1


def test_not_covered_is_never_counted_as_a_pass():
    g = gpu_check()
    gap = g.uncovered("1 GPU; DDP over NCCL needs 2")
    code, why = g.exit_status([g.passed("a"), gap])
    assert code == 1 and "NOT COVERED" in why
    assert g.exit_status([g.passed("a"), gap], allow_partial=True)[0] == 0
    # nothing passed: only gaps, even ones no machine could cover, are not a pass
    assert g.exit_status([gap], allow_partial=True)[0] == 1
    assert g.exit_status([g.uncovered("between nodes", expected=False)])[0] == 1
    assert g.exit_status([])[0] == 1
    # a verdict that is none of the three is a failure, not a pass
    assert g.exit_status([g.passed("a"), g.Verdict("n/a", "peak reset")])[0] == 1


def test_a_precision_row_fails_on_what_it_promises_and_is_not_covered_without_the_format():
    g = gpu_check()
    good = {"status": "completed", "reason": None, "val_loss": 2.1, "fp32_matmul": "ieee",
            "getters": []}
    assert g.run_verdict("bf16", [good, good]).status == g.PASS
    assert g.run_verdict("fp32 TF32", [good]).status == g.FAIL  # TF32 was asked for
    assert g.run_verdict("fp32 TF32", [{**good, "fp32_matmul": "tf32"}]).status == g.PASS
    assert g.run_verdict("bf16", [good, {**good, "getters": ["cudnn.allow_tf32"]}]
                         ).status == g.FAIL
    assert g.run_verdict("fp16", [{**good, "val_loss": float("nan")}]).status == g.FAIL
    assert g.run_verdict("bf16", [{**good, "status": "diverged", "reason": "nan"}]
                         ).status == g.FAIL
    gap = g.run_verdict("tf32", [{**good, "status": "unsupported_precision",
                                  "reason": "tf32 needs compute capability >= 8.0"}])
    assert gap.status == g.NOT_COVERED and gap.expected


def test_the_utilisation_row_fails_on_a_null_or_idle_figure_and_needs_pynvml():
    g = gpu_check()
    assert g.util_verdict([88.0, 93.5], None).status == g.PASS
    assert g.util_verdict([88.0, None], None).status == g.FAIL      # pynvml there, no figure
    assert g.util_verdict([0.0, 0.0], None).status == g.FAIL        # never busy: wrong GPU
    assert g.util_verdict([88.0, 130.0], None).status == g.FAIL
    assert g.util_verdict([], None).status == g.FAIL
    gap = g.util_verdict([None, None], "ModuleNotFoundError: No module named 'pynvml'")
    assert gap.status == g.NOT_COVERED and gap.expected and "pip install nvidia-ml-py" in gap.detail


def test_the_summary_counts_each_verdict_once_and_carries_the_exit_status():
    g = gpu_check()
    rows = [g.row("precision", "m", "bf16", g.passed("x")),
            g.row("sweep 2 workers", "-", "x", g.uncovered("1 GPU")),
            g.row("NCCL between nodes", "-", "-", g.uncovered("one machine", expected=False))]
    summary = g.summary_of(rows, 1.0, allow_partial=False)
    assert (summary["passed"], summary["failed"], summary["not_covered"]) == (1, 0, 2)
    assert summary["exit"] == 1
    assert g.summary_of(rows, 1.0, allow_partial=True)["exit"] == 0
    assert rows[1][0][-1] == "NOT COVERED: 1 GPU"


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
