"""The GPU path, proven on a real GPU in one run (within 8 minutes on one modern GPU).

Prints one table:

* step time, tokens/s and peak memory of charlm under the harness at ~10M and ~85M
  parameters, in fp32 with TF32 off (strict) and on, bf16 and fp16 (interleaved
  repetitions, medians; the second epoch's ``samples_per_s``, evaluation excluded), with
  the fp16 GradScaler's skipped steps;
* the GradScaler from an initial scale of 2**24: it skips the overflowing steps, lowers
  the scale and trains on;
* that peak memory is reset per trial: a small model trained after a large one in the same
  process (as a reused Tune actor does) reports its own peak, not the large one's;
* a one-rank NCCL process group: all-reduce and broadcast, and the NCCL version;
* checkpoint and resume on CUDA, per precision;
* host syncs per training step, counted by ``torch.cuda.set_sync_debug_mode``;
* the share of an epoch at ``search_spaces/gpu-ddp.yaml``'s shape spent on reports and
  checkpoints instead of steps (``benchmarks/report_share.py``'s measurement, on CUDA);
* a 4-trial ASHA sweep of one-worker trials on the GPU(s), through ``run_sweep``, whose
  reused (warm) actors lose one worker process mid-trial (``benchmarks/_dies_once.py``):
  the trial continues from its checkpoint and nothing is failed;
* with 2 or more GPUs, the same with 2-worker DDP trials on warm worker groups (NCCL);
* no CUDA memory left allocated at the end.

Every row has a verdict that can fail: PASS, FAIL, or NOT COVERED with its reason (never
a pass). ``--list`` prints each check, what it proves and what makes it fail. The last
line is one JSON summary of the verdicts.

The goal it states: bf16 at least 2.5x the throughput of strict fp32 on the 85M model (a
row of its own, FAIL when missed). Exit status (:func:`exit_status`): 0 only when every
covered row passed and no row this machine was expected to cover is NOT COVERED (the
2-GPU rows on a 1-GPU machine are accepted with ``--allow-partial``; NCCL between nodes
is never expected of one machine); 1 otherwise. Without CUDA it prints "no CUDA" and
exits 2: nothing was measured.

    .venv/bin/python benchmarks/gpu_check.py [--reps 2] [--no-sweeps] [--allow-partial] [--list]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

GOAL_BF16_VS_FP32 = 2.5

PASS, FAIL, NOT_COVERED = "PASS", "FAIL", "NOT COVERED"


@dataclass(frozen=True)
class Verdict:
    """One row's verdict. ``expected``: for NOT COVERED, whether this machine was
    expected to cover the row (``False`` only for what no single machine can cover)."""

    status: str
    detail: str
    expected: bool = True

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}"


def passed(detail: str) -> Verdict:
    return Verdict(PASS, detail)


def failed(detail: str) -> Verdict:
    return Verdict(FAIL, detail)


def judged(ok: bool, detail: str) -> Verdict:
    return Verdict(PASS if ok else FAIL, detail)


def uncovered(why: str, *, expected: bool = True) -> Verdict:
    return Verdict(NOT_COVERED, why, expected)


def exit_status(verdicts: list[Verdict], *, allow_partial: bool = False) -> tuple[int, str]:
    """The script's exit status and why: 0 only when at least one row passed, none
    failed, and nothing this machine was expected to cover is NOT COVERED (accepted with
    ``allow_partial``). A verdict that is none of the three counts as a failure."""
    counts = {status: [v for v in verdicts if v.status == status]
              for status in (PASS, FAIL, NOT_COVERED)}
    odd = [v for v in verdicts if v.status not in counts]
    if counts[FAIL] or odd:
        return 1, f"{len(counts[FAIL]) + len(odd)} row(s) failed"
    missing = [v for v in counts[NOT_COVERED] if v.expected]
    if missing and not allow_partial:
        return 1, (f"{len(missing)} row(s) NOT COVERED that this check expects to cover "
                   "(--allow-partial accepts them, e.g. on a 1-GPU machine)")
    if not counts[PASS]:
        return 1, "no row passed"
    return 0, (f"every covered row passed ({len(counts[PASS])})"
               + (f"; {len(missing)} NOT COVERED accepted (--allow-partial)" if missing else ""))

#: Each check: what it proves, and what makes it FAIL or NOT COVERED (``--list``), in
#: the table's order.
CHECKS = (
    ("precision", "step time, tokens/s and peak memory of charlm at ~10M and ~85M "
                  "parameters in fp32 (strict), tf32, bf16 and fp16, interleaved",
     "FAIL: a run does not complete, its val_loss is not finite, its report's fp32_matmul "
     "is not what the mode asks (tf32 for 'fp32 TF32', ieee otherwise), or a torch "
     "precision getter raises after it. NOT COVERED: the GPU lacks the precision"),
    ("goal", f"bf16 at least {GOAL_BF16_VS_FP32}x the throughput of strict fp32 at 85M",
     f"FAIL: below {GOAL_BF16_VS_FP32}x. NOT COVERED: bf16 or fp32 did not run"),
    ("fp16 GradScaler", "from an initial scale of 2**24 the CUDA scaler skips the overflowing "
                        "steps, lowers the scale and trains on",
     "FAIL: no step skipped, the run did not complete, or its loss is not finite"),
    ("peak memory reset", "a small model trained after a large one in one process (a reused "
                          "Tune actor) reports its own peak memory",
     "FAIL: the small run's peak is above 1.1x its first run's or not below the large "
     "one's, or a run reports no peak or does not complete"),
    ("GPU utilisation", "a 10M fp32 run of 2 x 400 steps reports gpu_util_pct: NVML read "
                        "once a second in a thread (torch.cuda.utilization), averaged over "
                        "each report's training window",
     "FAIL: a report's gpu_util_pct is null although pynvml imports, or outside 0-100, or "
     "no report's is above 0 (the wrong GPU read). NOT COVERED: nvidia-ml-py is not "
     "installed"),
    ("NCCL one rank", "a one-rank NCCL process group forms on this GPU; all-reduce and "
                      "broadcast give the right values; the NCCL version",
     "FAIL: the group does not form, a collective raises, or a value is wrong"),
    ("checkpoint + resume", "per precision, a run checkpoints on CUDA; a run resumed from it "
                            "at the same point evaluates to the same val_loss (the weights "
                            "were restored), and one resumed for a second epoch reports "
                            "epoch 2 only",
     "FAIL: the restored model's val_loss differs from the saved one's (relative 1e-3), "
     "the resumed run trains epoch 1 again, or a run does not complete"),
    ("host syncs", "per precision, the CUDA syncs per training step between a 32- and a "
                   "96-step run (set_sync_debug_mode): at most the divergence check's one per "
                   "32 steps",
     "FAIL: more syncs per step, or none captured at all in a run (the debug mode did not "
     "report, so nothing was measured)"),
    ("report share", "at gpu-ddp.yaml's shape, the share of an epoch spent on the report's "
                     "evaluation and on checkpoints (write + copy to storage): under 5%",
     "FAIL: over 5%, or the measurement raises"),
    ("sweep 1 worker", "a 4-trial ASHA sweep of one-worker trials in warm (reused) actors "
                       "through run_sweep, one worker process killed mid-trial",
     "FAIL: the sweep does not finish, a trial fails, no worker was killed or its trial "
     "started over instead of resuming, or no trial recorded its GPU"),
    ("sweep GPU ids", "trials that run at the same time train on different GPUs",
     "FAIL: fewer distinct GPU ids than min(4 trials, GPUs). NOT COVERED: 1 GPU"),
    ("sweep peak reset", "a small trial that ran after a large one on the same GPU "
                         "reports its own peak memory",
     "FAIL: its peak is not below the large trials'. NOT COVERED: no small trial followed "
     "a large one on a GPU in this run"),
    ("sweep 2 workers", "with 2+ GPUs, the same sweep with 2-worker DDP trials on warm "
                        "worker groups over NCCL: each group's first collective under the "
                        "guard (NCCL bound to its GPU), each worker on its own GPU",
     "FAIL: as 'sweep 1 worker', or a trial's two workers share a GPU id. NOT COVERED: "
     "1 GPU"),
    ("memory left", "after every check, on every visible GPU: nothing allocated in this "
                    "process, and no more GPU memory in use than before the first check",
     "FAIL: memory still allocated here, or a GPU holds over 256 MiB more than at the "
     "start (a process left behind)"),
    ("NCCL between nodes", "NOT COVERED here (one machine): needs a sweep of 2-node trials "
                           "on the cluster",
     "never covered by this script; not expected of one machine"),
)
CASES = {
    "10M": {"n_layer": 6, "n_embd": 384, "n_head": 6, "block_size": 256, "batch_size": 64,
            "samples_per_epoch": 64 * 40},
    "85M": {"n_layer": 12, "n_embd": 768, "n_head": 12, "block_size": 512, "batch_size": 32,
            "samples_per_epoch": 32 * 25},
}
#: (label, precision): the harness sets TF32 from the precision on every trial
MODES = (("fp32 strict", "fp32"), ("fp32 TF32", "tf32"), ("bf16", "bf16"), ("fp16", "fp16"))
COMMON = {"lr": 3e-4, "epochs": 2, "warmup_steps": 5, "val_samples": 64, "checkpoint_every": 0,
          "corpus_bytes": 5_000_000, "use_gpu": True}
COLUMNS = ("check", "model", "mode", "ms/step", "vs strict fp32", "tokens/s", "peak MB",
           "skipped", "val_loss", "verdict")
#: A row of the table and its verdict (the row's last column is the verdict's text).
Row = tuple[tuple, Verdict]


def row(check: str, model: str, mode: str, verdict: Verdict, *, ms: str = "-",
        ratio: str = "-", tokens: str = "-", peak: str = "-", skipped: str = "-",
        loss: str = "-") -> Row:
    return (check, model, mode, ms, ratio, tokens, peak, skipped, loss, str(verdict)), verdict


def one_run(case: dict, precision: str, **extra) -> dict:
    """Train charlm for 2 epochs in this process; the second epoch's speed, the peak,
    and whether every torch precision getter still reads afterwards."""
    from hpsearch.train import LocalSession, train
    from hpsearch.workloads import charlm

    session = LocalSession()
    result = train({**COMMON, **case, "precision": precision, **extra}, charlm.WORKLOAD,
                   session)
    last = session.reports[-1]
    return {"status": result.status, "reason": result.reason,
            "samples_per_s": last.get("samples_per_s"), "val_loss": last.get("val_loss"),
            "skipped": last.get("skipped_steps"), "peak_mem_mb": last.get("peak_mem_mb"),
            "fp32_matmul": last.get("fp32_matmul"), "getters": unreadable_getters()}


def unreadable_getters() -> list[str]:
    """The torch precision getters that raise now (torch refuses the legacy ones once the
    newer fp32_precision flags disagree with them; inductor reads them)."""
    import torch

    getters = {
        "get_float32_matmul_precision()": torch.get_float32_matmul_precision,
        "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "cuda.matmul.fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
        "cudnn.conv.fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
        "cudnn.rnn.fp32_precision": lambda: torch.backends.cudnn.rnn.fp32_precision,
    }
    bad = []
    for name, getter in getters.items():
        try:
            getter()
        except RuntimeError:
            bad.append(name)
    return bad


def params_of(case: dict) -> float:
    from hpsearch.workloads import charlm

    model = charlm.build_model(case)
    return sum(p.numel() for p in model.parameters()) / 1e6


def run_verdict(label: str, runs: list[dict]) -> Verdict:
    """A precision row's verdict from its repetitions (see CHECKS)."""
    first = runs[0]
    if first["status"] == "unsupported_precision":
        return uncovered(f"this GPU cannot run it: {first['reason']}")
    want = "tf32" if label == "fp32 TF32" else "ieee"
    problems = []
    for r in runs:
        if r["status"] != "completed":
            problems.append(f"{r['status']}: {r['reason']}")
        elif not (isinstance(r["val_loss"], float) and math.isfinite(r["val_loss"])):
            problems.append(f"val_loss {r['val_loss']}")
        if r["status"] == "completed" and r["fp32_matmul"] != want:
            problems.append(f"fp32_matmul {r['fp32_matmul']}, not {want}")
        if r["getters"]:
            problems.append(f"getters raise: {', '.join(r['getters'])}")
    if problems:
        return failed("; ".join(sorted(set(problems)))[:200])
    return passed(f"{len(runs)} runs, fp32_matmul {want}, every precision getter reads")


def precision_rows(reps: int) -> tuple[list[Row], dict]:
    rows, seen = [], {}
    for name, case in CASES.items():
        one_run(case, "bf16")  # warm the corpus cache, the allocator and the kernels
        runs: dict[str, list[dict]] = {label: [] for label, _ in MODES}
        for rep in range(reps):
            for label, precision in (MODES if rep % 2 == 0 else MODES[::-1]):
                runs[label].append(one_run(case, precision))
        model = f"charlm {params_of(case):.1f}M"
        batch, block = case["batch_size"], case["block_size"]
        strict = [r["samples_per_s"] for r in runs["fp32 strict"] if r["status"] == "completed"]
        for label, _ in MODES:
            verdict = run_verdict(label, runs[label])
            done = [r for r in runs[label] if r["status"] == "completed"]
            if verdict.status != PASS or not done:
                rows.append(row("precision", model, label, verdict))
                continue
            speed = statistics.median(r["samples_per_s"] for r in done)
            ratio = speed / statistics.median(strict) if strict else math.nan
            seen[(name, label)] = {"ratio": ratio, "peak": _peak(done)}
            rows.append(row("precision", model, label, verdict,
                            ms=f"{1000 * batch / speed:.1f}", ratio=f"{ratio:.2f}x",
                            tokens=f"{speed * block:,.0f}", peak=_mb(_peak(done)),
                            skipped=str(max(r["skipped"] for r in done)),
                            loss=f"{statistics.median(r['val_loss'] for r in done):.4f}"))
    return rows, seen


def goal_row(seen: dict) -> Row:
    ratio = seen.get(("85M", "bf16"), {}).get("ratio")
    if ratio is None or not math.isfinite(ratio):
        verdict = uncovered("bf16 or strict fp32 did not run at 85M")
    else:
        verdict = judged(ratio >= GOAL_BF16_VS_FP32, f"{ratio:.2f}x, goal >= "
                         f"{GOAL_BF16_VS_FP32}x")
    return row("goal", "charlm 85M", "bf16 vs fp32 strict", verdict,
               ratio="-" if ratio is None else f"{ratio:.2f}x")


def _peak(runs: list[dict]) -> float | None:
    peaks = [r["peak_mem_mb"] for r in runs if r["peak_mem_mb"] is not None]
    return max(peaks) if peaks else None


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def scaler_row() -> Row:
    run = one_run(CASES["10M"], "fp16", loss_scale_init=2.0 ** 24)
    loss = run["val_loss"]
    ok = (run["status"] == "completed" and (run["skipped"] or 0) >= 1
          and isinstance(loss, float) and math.isfinite(loss))
    return row("fp16 GradScaler", "charlm 10M", "fp16, init scale 2^24",
               judged(ok, "skipped the overflowing steps, trained on" if ok else
                      f"{run['status']}, {run['skipped']} skipped, val_loss {loss}"),
               peak=_mb(run["peak_mem_mb"]), skipped=str(run["skipped"]),
               loss="-" if loss is None else f"{loss:.4f}")


def peak_reset_row() -> Row:
    """A 10M run, then an 85M one, then a 10M one again in this process: the last must
    report the 10M peak, not the 85M one (strict fp32: every GPU runs it)."""
    small, large, again = (one_run(CASES[c], "fp32", epochs=1) for c in ("10M", "85M", "10M"))
    runs = {"first 10M": small, "85M": large, "10M again": again}
    bad = [f"{k} {r['status']}" for k, r in runs.items() if r["status"] != "completed"]
    bad += [f"{k} reported no peak" for k, r in runs.items() if r["peak_mem_mb"] is None]
    if bad:
        verdict = failed("; ".join(bad))
    else:
        ok = (again["peak_mem_mb"] <= 1.1 * small["peak_mem_mb"]
              and again["peak_mem_mb"] < large["peak_mem_mb"])
        verdict = judged(ok, f"first 10M run {small['peak_mem_mb']:.0f} MB, 85M "
                             f"{large['peak_mem_mb']:.0f} MB, 10M again "
                             f"{again['peak_mem_mb']:.0f} MB")
    return row("peak memory reset", "10M after 85M", "fp32", verdict,
               peak=_mb(again["peak_mem_mb"]))


def util_verdict(values: list, missing: str | None) -> Verdict:
    """The GPU utilisation row's verdict from its reports' ``gpu_util_pct`` (see CHECKS);
    ``missing``: why pynvml does not import, or ``None``."""
    if missing is not None:
        return uncovered(f"nvidia-ml-py is not installed ({missing}): pip install nvidia-ml-py")
    if not values:
        return failed("the run made no report")
    if any(v is None for v in values):
        return failed(f"gpu_util_pct null in reports {values} although pynvml imports")
    if any(not 0 <= v <= 100 for v in values):
        return failed(f"gpu_util_pct outside 0-100: {values}")
    return judged(max(values) > 0, "reports " + ", ".join(f"{v:.0f}%" for v in values))


def util_row() -> Row:
    from hpsearch.train import LocalSession, train
    from hpsearch.workloads import charlm

    try:
        import pynvml  # noqa: F401 - what torch.cuda.utilization imports
        missing = None
    except ImportError as exc:
        missing = f"{type(exc).__name__}: {exc}"[:80]
    session = LocalSession()
    case = {**CASES["10M"], "samples_per_epoch": 64 * 400}
    result = train({**COMMON, **case, "precision": "fp32"}, charlm.WORKLOAD, session)
    values = [r.get("gpu_util_pct") for r in session.reports]
    verdict = util_verdict(values, missing) if result.status == "completed" else \
        failed(f"{result.status}: {result.reason}")
    return row("GPU utilisation", "charlm 10M", "fp32", verdict)


def nccl_row() -> Row:
    """A one-rank NCCL group on cuda:0: the collectives hpsearch uses, and the version."""
    import datetime

    import torch
    import torch.distributed as dist

    from hpsearch.driver.cluster.connect import free_port

    mode = "all-reduce, broadcast"
    try:
        store = dist.TCPStore("127.0.0.1", free_port(), 1, True,
                              timeout=datetime.timedelta(seconds=60))
        dist.init_process_group("nccl", store=store, rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=60),
                                device_id=torch.device("cuda", 0))
        try:
            t = torch.full((4,), 3.0, device="cuda")
            dist.all_reduce(t)
            dist.broadcast(t, src=0)
            torch.cuda.synchronize()
            ok = bool((t == 3.0).all())
        finally:
            dist.destroy_process_group()
        version = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return row("NCCL one rank", "-", mode, failed(f"{type(exc).__name__}: {exc}"[:200]))
    return row("NCCL one rank", "-", mode,
               judged(ok, f"NCCL {version}" + ("" if ok else ", wrong values")))


def resume_rows(precisions: list[str]) -> list[Row]:
    """Per precision: one epoch with a checkpoint; a run resumed from it with the same
    budget (it trains nothing and evaluates the restored weights: the same val_loss as
    the first run's last report); a run resumed for a second epoch."""
    from hpsearch.train import LocalSession, train
    from hpsearch.workloads import charlm

    rows = []
    for precision in precisions:
        with tempfile.TemporaryDirectory(prefix="hpsearch-gpu-resume-") as root:
            config = {**COMMON, **CASES["10M"], "precision": precision, "checkpoint_every": 1}
            before = LocalSession(root=root)
            first = train({**config, "epochs": 1}, charlm.WORKLOAD, before)
            same = LocalSession(root=root, resume_from=before.last_checkpoint)
            restored = train({**config, "epochs": 1}, charlm.WORKLOAD, same)
            session = LocalSession(root=root, resume_from=before.last_checkpoint)
            second = train({**config, "epochs": 2}, charlm.WORKLOAD, session)
            saved = before.reports[-1].get("val_loss") if before.reports else None
            back = same.reports[-1].get("val_loss") if same.reports else None
            epochs = [r["epoch"] for r in session.reports]
            loss = session.reports[-1].get("val_loss") if session.reports else None
            statuses = {first.status, restored.status, second.status}
            weights_ok = (saved is not None and back is not None and math.isfinite(saved)
                          and abs(back - saved) <= 1e-3 * abs(saved))
            ok = statuses == {"completed"} and weights_ok and epochs == [2] and \
                loss is not None and math.isfinite(loss)
            detail = (f"restored val_loss {back} vs saved {saved}; resumed run's epochs "
                      f"{epochs}" + ("" if statuses == {"completed"} else
                                     f"; statuses {sorted(statuses)}"))
            rows.append(row("checkpoint + resume", "charlm 10M", precision,
                            judged(ok, detail), loss="-" if loss is None else f"{loss:.4f}"))
    return rows


def syncs_rows(precisions: list[str]) -> list[Row]:
    """Per precision: CUDA syncs per step, from the difference of a 32- and a 96-step run
    (what both share, building, evaluating and reporting, cancels out)."""
    import warnings

    import torch

    limit = 1 / 32 + 1 / 64  # the divergence check: one sync per diverge_window (32) steps
    rows = []
    for precision in precisions:
        counts, status = {}, "completed"
        for steps in (32, 32, 96):  # the first 32-step run warms kernels and allocators
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    run = one_run(CASES["10M"], precision, epochs=1, samples_per_epoch=64 * steps)
                finally:
                    torch.cuda.set_sync_debug_mode(0)
            counts[steps] = sum("synchroniz" in str(w.message) for w in seen)
            status = run["status"] if run["status"] != "completed" else status
        per_step = (counts[96] - counts[32]) / 64
        detail = (f"{per_step:.3f} per step ({counts[32]} in 32 steps, {counts[96]} in 96; at "
                  f"most {limit:.3f})" + ("" if status == "completed" else f"; {status}"))
        if counts[32] == 0 or counts[96] == 0:  # a report syncs: none seen means none measured
            verdict = failed("no sync captured: set_sync_debug_mode reported nothing; " + detail)
        else:
            verdict = judged(status == "completed" and per_step <= limit, detail)
        rows.append(row("host syncs", "charlm 10M", precision, verdict))
    return rows


def share_row(storage: str) -> Row:
    """gpu-ddp.yaml's shape on this GPU: one rank's steps, report and checkpoint."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import report_share

    shape = report_share.shipped_shape()
    batch, val = report_share.per_rank(shape)
    model = "charlm (gpu-ddp.yaml)"
    try:
        cost = report_share.costs(shape, batch=batch, val=int(val), steps=30, precision="bf16",
                                  use_gpu=True)
        ckpt_s, mb = report_share.checkpoint_seconds(shape, storage, device="cuda")
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return row("report share", model, "bf16", failed(f"{type(exc).__name__}: {exc}"[:200]))
    share = report_share.epoch_share(shape, batch * cost["train_s_per_sample"],
                                     val * cost["val_s_per_sample"], ckpt_s)
    total = share["report_pct"] + share["checkpoint_pct"]
    return row("report share", model, "bf16", judged(
        total <= 5, f"reports {share['report_pct']:.1f}% + checkpoints "
        f"{share['checkpoint_pct']:.1f}% of a {share['epoch_s']:.0f}-s epoch ({mb:.0f} MB "
        f"in {ckpt_s:.1f} s every {shape['checkpoint_every']} epochs; goal <= 5%)"),
        ms=f"{share['step_ms']:.1f}")


def gpu_memory_used() -> list[float]:
    """MiB in use on each visible GPU, by every process (``cudaMemGetInfo``)."""
    import torch

    used = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        used.append((total - free) / 2**20)
    return used


def memory_row(used_before: list[float]) -> Row:
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()
    problems, notes = [], []
    for index, (before, now) in enumerate(zip(used_before, gpu_memory_used())):
        mine = torch.cuda.memory_allocated(index) / 2**20
        if mine > 0:
            problems.append(f"cuda:{index} {mine:.1f} MB still allocated here")
        if now - before > 256:
            problems.append(f"cuda:{index} {now - before:.0f} MB more in use than at the start")
        notes.append(f"cuda:{index} {now:.0f} MB in use (start {before:.0f})")
    verdict = failed("; ".join(problems)) if problems else passed("; ".join(notes))
    return row("memory left", "-", f"{len(used_before)} GPU(s), after every check", verdict)


def sweep_space(name: str, *, workers: int, precision: str, die_once_file: str) -> dict:
    """4 trials of 3 epochs of 20 steps; the first trial to reach step 30 (mid-epoch 2,
    after its epoch-1 checkpoint) loses its worker process once."""
    params = {"lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
              "n_layer": 6, "n_head": 4, "block_size": 256, "batch_size": 64,
              "samples_per_epoch": 64 * 20, "val_samples": 64, "corpus_bytes": 2_000_000,
              "precision": precision, "checkpoint_every": 1,
              "die_once_file": die_once_file, "die_at_step": 30}
    if workers == 1:  # two model sizes, so a small trial may follow a large one in an actor
        params["n_embd"] = {"type": "categorical", "choices": [384, 128]}
    else:
        params["n_embd"] = 384
    return {"name": name, "trainable": "benchmarks._dies_once:WORKLOAD",
            "objective": {"metric": "val_loss", "mode": "min"}, "params": params,
            "search": {"algorithm": "random", "seed": 0},
            "scheduler": {"type": "asha", "max_t": 3, "grace_period": 1, "reduction_factor": 2},
            "trials": {"num": 4, "max_concurrent": "auto", "max_failures": 1},
            "resources": {"workers": workers, "use_gpu": True, "cpus_per_worker": 1,
                          "warm_workers": True, "first_collective_timeout": "60s"}}


def sweep_rows(workers: int, precision: str, storage: str, gpus: int) -> list[Row]:
    import hpsearch
    from hpsearch.driver.sweep.run import run_sweep
    from hpsearch.space import parse_space
    from hpsearch.store import status as st

    check = f"sweep {workers} worker" + ("s" if workers > 1 else "")
    label = (f"ASHA, 4 x {workers} worker(s)" + (" (NCCL, warm groups)" if workers > 1 else
                                                 " (warm Tune actors)"))
    marker = os.path.join(storage, f"died-{workers}w.json")
    out = io.StringIO()
    started = time.perf_counter()
    try:
        result = run_sweep(parse_space(sweep_space(f"gpu-check-{workers}w", workers=workers,
                                                   precision=precision, die_once_file=marker)),
                           storage=storage, stream=out)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        print(out.getvalue(), file=sys.stderr)
        return [row(check, "charlm", label, failed(f"{type(exc).__name__}: {exc}"[:200]))]
    wall = time.perf_counter() - started
    trials = hpsearch.read_trials(result.sweep_dir)
    history = hpsearch.read_history(result.sweep_dir)
    statuses = trials.status.value_counts().to_dict()
    ok = (result.status == st.SWEEP_FINISHED
          and set(statuses) <= {st.COMPLETED, st.STOPPED_BY_ASHA}
          and statuses.get(st.COMPLETED, 0) >= 1)
    notes = [", ".join(f"{n} {s}" for s, n in statuses.items()), f"{wall:.0f} s"]
    fault_ok, fault_note = survived_a_worker_death(marker, trials, history)
    ok = ok and fault_ok
    notes.append(fault_note)
    rows: list[Row] = []
    if "gpu_ids" not in history or history.gpu_ids.isna().all():
        ok = False
        notes.append("no gpu_ids recorded")
        per_trial = None
    else:
        per_trial = history.dropna(subset=["gpu_ids"]).groupby("trial_id").gpu_ids.first()
        if workers > 1:
            shared = [ids for ids in per_trial if len(set(ids.split(";"))) != workers]
            ok = ok and not shared
            notes.append(f"gpu_ids {sorted(set(per_trial))}"
                         + (f"; workers sharing a GPU: {shared}" if shared else ""))
    peak = history.groupby("trial_id").peak_mem_mb.max()
    if not ok:
        print(out.getvalue(), file=sys.stderr)
    best = trials.best_value.min()
    rows.append(row(check, "charlm", label, judged(ok, "; ".join(notes)),
                    peak=_mb(peak.max() if peak.notna().any() else None),
                    loss=f"{best:.4f}" if math.isfinite(best) else "-"))
    if workers == 1:
        rows.append(gpu_ids_row(per_trial, gpus))
        rows.append(sweep_peak_row(trials, peak, per_trial))
    return rows


def gpu_ids_row(per_trial, gpus: int) -> Row:
    """One-worker trials all start at once (max_concurrent auto), each in its own actor
    on its own GPU: as many distinct GPU ids as trials that fit at once."""
    label = "4 x 1 worker, trials at once"
    if gpus < 2:
        return row("sweep GPU ids", "-", label, uncovered("1 GPU: every trial runs on it"))
    if per_trial is None:
        return row("sweep GPU ids", "-", label, failed("no gpu_ids recorded"))
    distinct, want = set(per_trial), min(4, gpus)
    return row("sweep GPU ids", "-", label, judged(
        len(distinct) >= want, f"{len(distinct)} distinct GPU ids {sorted(distinct)}; "
        f"expected {want}"))


def sweep_peak_row(trials, peak, per_trial) -> Row:
    """A 128-wide trial that started after a 384-wide one on the same GPU (a reused
    actor) must report a peak below every 384-wide trial's."""
    label = "n_embd 128 after 384, one GPU"
    if per_trial is None or "n_embd" not in trials or not peak.notna().all():
        return row("sweep peak reset", "-", label, failed("no gpu_ids or peak memory recorded"))
    table = trials.set_index("trial_id")
    after = [t for t in table.index[table.n_embd == 128] if any(
        per_trial.get(t) == per_trial.get(u) and table.started_at[u] < table.started_at[t]
        for u in table.index[table.n_embd == 384])]
    large = peak[table.n_embd[table.n_embd == 384].index]
    if not after or large.empty:
        return row("sweep peak reset", "-", label,
                   uncovered("no 128-wide trial followed a 384-wide one on a GPU in this run"))
    small = peak[after].max()
    return row("sweep peak reset", "-", label, judged(
        small < large.min(), f"128 after 384: {small:.0f} MB; 384: {large.min():.0f} MB"))


def survived_a_worker_death(marker: str, trials, history) -> tuple[bool, str]:
    """Did one worker die, and did its trial go on from its checkpoint, not from scratch?"""
    if not os.path.exists(marker):
        return False, "no worker was killed (no trial reached step 30)"
    with open(marker) as f:
        died = json.load(f)
    ids = trials.trial_id[(trials.lr - died["lr"]).abs() < 1e-12 * died["lr"]]
    if len(ids) != 1:
        return False, f"the killed trial (lr {died['lr']:.3g}) is not in the table"
    row_ = trials.set_index("trial_id").loc[ids.iloc[0]]
    epochs = list(history[history.trial_id == ids.iloc[0]].epoch)
    ok = row_.status in ("completed", "stopped_by_asha") and epochs.count(1) == 1 and \
        max(epochs) >= 2
    return ok, (f"worker of {ids.iloc[0]} killed at step 30: {row_.status}, epochs {epochs}"
                + ("" if ok else " (expected one epoch 1: resumed from its checkpoint)"))


def print_table(rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    for row in [COLUMNS, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())


def summary_of(rows: list[Row], seconds: float, *, allow_partial: bool) -> dict:
    verdicts = [v for _, v in rows]
    code, why = exit_status(verdicts, allow_partial=allow_partial)
    return {"passed": sum(v.status == PASS for v in verdicts),
            "failed": sum(v.status == FAIL for v in verdicts),
            "not_covered": sum(v.status == NOT_COVERED for v in verdicts),
            "exit": code, "why": why, "seconds": round(seconds),
            "checks": [{"check": r[0], "model": r[1], "mode": r[2], "verdict": str(v)}
                       for r, v in rows]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions")
    parser.add_argument("--no-sweeps", action="store_true",
                        help="skip the Ray sweeps (their rows are NOT COVERED)")
    parser.add_argument("--allow-partial", action="store_true",
                        help="exit 0 even with rows this machine could not cover (1 GPU)")
    parser.add_argument("--list", action="store_true",
                        help="say what each check proves and what makes it fail")
    args = parser.parse_args(argv)
    if args.list:
        for check, proves, fails in CHECKS:
            print(f"{check:<20} {proves}\n{'':<20} {fails}")
        return 0

    import torch

    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA here (torch {torch.__version__}, CUDA build "
              f"{torch.version.cuda or 'none'}); nothing measured")
        return 2
    if os.environ.pop("HPSEARCH_SIMULATE_GPU", None):
        print("gpu_check: ignoring HPSEARCH_SIMULATE_GPU: this checks real GPUs")
    started = time.perf_counter()
    gpus = torch.cuda.device_count()
    used_before = gpu_memory_used()  # also makes a context on every GPU, now and at the end
    name = torch.cuda.get_device_name(0)
    capability = ".".join(map(str, torch.cuda.get_device_capability(0)))
    print(f"gpu_check: torch {torch.__version__} (CUDA {torch.version.cuda}), {gpus} x {name} "
          f"(compute capability {capability}); {args.reps} interleaved repetitions, medians")

    rows, seen = precision_rows(args.reps)
    rows.append(goal_row(seen))
    rows += [scaler_row(), peak_reset_row(), util_row(), nccl_row()]
    ran = [precision for label, precision in MODES if ("10M", label) in seen]
    rows += resume_rows(ran or ["fp32"])
    rows += syncs_rows([p for p in ran if p in ("bf16", "fp16")] or ["fp32"])
    with tempfile.TemporaryDirectory(prefix="hpsearch-gpu-share-") as storage:
        rows.append(share_row(storage))
    two = "1 GPU; DDP over NCCL needs 2"
    if args.no_sweeps:
        for check in ("sweep 1 worker", "sweep GPU ids", "sweep peak reset", "sweep 2 workers"):
            rows.append(row(check, "-", "ASHA sweep", uncovered("--no-sweeps")))
    else:
        precision = "bf16" if ("10M", "bf16") in seen else "fp32"
        with tempfile.TemporaryDirectory(prefix="hpsearch-gpu-check-") as storage:
            rows += sweep_rows(1, precision, storage, gpus)
            rows += sweep_rows(2, precision, storage, gpus) if gpus >= 2 else [
                row("sweep 2 workers", "-", "ASHA, 4 x 2 workers (NCCL)", uncovered(two))]
    rows.append(memory_row(used_before))
    rows.append(row("NCCL between nodes", "-", "-",
                    uncovered("one machine; run a sweep of 2-node trials on the cluster",
                              expected=False)))
    print()
    print_table([r for r, _ in rows])
    summary = summary_of(rows, time.perf_counter() - started, allow_partial=args.allow_partial)
    print(f"\n{summary['seconds']} s: {summary['passed']} passed, {summary['failed']} failed, "
          f"{summary['not_covered']} NOT COVERED; exit {summary['exit']}: {summary['why']}")
    print(json.dumps(summary))
    return summary["exit"]


if __name__ == "__main__":
    sys.exit(main())
