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

What one machine cannot check (DDP with 1 GPU, NCCL between nodes) is a row that says
NOT COVERED, never a pass. ``--list`` prints what each check proves. The last line is
one JSON summary of the verdicts.

The goal it states: bf16 at least 2.5x the throughput of strict fp32 on the 85M model.
Exit status 1 when a correctness check fails (not for a missed speed goal). Without CUDA it
prints "no CUDA" and exits 0.

    .venv/bin/python benchmarks/gpu_check.py [--reps 2] [--no-sweeps] [--list]
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

GOAL_BF16_VS_FP32 = 2.5

#: Each check and what it proves (``--list``), in the table's order.
CHECKS = (
    ("precision speed", "step time, tokens/s and peak memory of charlm at ~10M and ~85M "
                        "parameters in fp32 (strict), tf32, bf16 and fp16, interleaved; the "
                        f"goal: bf16 >= {GOAL_BF16_VS_FP32}x strict fp32 at 85M"),
    ("fp16 GradScaler", "from an initial scale of 2**24 the CUDA scaler skips the overflowing "
                        "steps, lowers the scale and trains on"),
    ("peak memory reset", "a small model trained after a large one in one process (a reused "
                          "Tune actor) reports its own peak memory"),
    ("NCCL one rank", "a one-rank NCCL process group forms on this GPU; all-reduce and "
                      "broadcast give the right values; the NCCL version"),
    ("checkpoint + resume", "per precision, a run checkpoints on CUDA and a second run "
                            "resumes from it at the next epoch with a finite loss"),
    ("host syncs", "per precision, the CUDA syncs per training step between a 32- and a "
                   "96-step run (set_sync_debug_mode): at most the divergence check's one per "
                   "32 steps"),
    ("report share", "at gpu-ddp.yaml's shape, the share of an epoch spent on the report's "
                     "evaluation and on checkpoints (write + copy to storage): under 5%"),
    ("sweep", "a 4-trial ASHA sweep of one-worker trials in warm (reused) actors through "
              "run_sweep, one worker process killed mid-trial: it continues from its "
              "checkpoint, no trial failed, each trial on its own GPU id, peak memory per "
              "trial reset; with 2+ GPUs the same with 2-worker DDP trials on warm worker "
              "groups over NCCL (NOT COVERED with 1 GPU)"),
    ("memory left", "after every check, no CUDA memory is still allocated in this process"),
    ("NCCL between nodes", "NOT COVERED here (one machine): needs a sweep of 2-node trials "
                           "on the cluster"),
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


def one_run(case: dict, precision: str, **extra) -> dict:
    """Train charlm for 2 epochs in this process; the second epoch's speed, the peak."""
    from hpsearch.train import LocalSession, train
    from hpsearch.workloads import charlm

    session = LocalSession()
    result = train({**COMMON, **case, "precision": precision, **extra}, charlm.WORKLOAD,
                   session)
    last = session.reports[-1]
    return {"status": result.status, "reason": result.reason,
            "samples_per_s": last.get("samples_per_s"), "val_loss": last.get("val_loss"),
            "skipped": last.get("skipped_steps"), "peak_mem_mb": last.get("peak_mem_mb")}


def params_of(case: dict) -> float:
    from hpsearch.workloads import charlm

    model = charlm.build_model(case)
    return sum(p.numel() for p in model.parameters()) / 1e6


def precision_rows(reps: int) -> tuple[list[tuple], dict]:
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
            done = [r for r in runs[label] if r["status"] == "completed"]
            if not done:
                rows.append(("precision", model, label, "-", "-", "-", "-", "-", "-",
                             f"{runs[label][0]['status']}: {runs[label][0]['reason']}"))
                continue
            speed = statistics.median(r["samples_per_s"] for r in done)
            ratio = speed / statistics.median(strict) if strict else math.nan
            seen[(name, label)] = {"ratio": ratio, "peak": _peak(done)}
            rows.append(("precision", model, label, f"{1000 * batch / speed:.1f}",
                         f"{ratio:.2f}x", f"{speed * block:,.0f}", _mb(_peak(done)),
                         str(max(r["skipped"] for r in done)),
                         f"{statistics.median(r['val_loss'] for r in done):.4f}", ""))
    return rows, seen


def _peak(runs: list[dict]) -> float | None:
    peaks = [r["peak_mem_mb"] for r in runs if r["peak_mem_mb"] is not None]
    return max(peaks) if peaks else None


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def scaler_row() -> tuple[tuple, bool]:
    run = one_run(CASES["10M"], "fp16", loss_scale_init=2.0 ** 24)
    ok = (run["status"] == "completed" and run["skipped"] >= 1
          and math.isfinite(run["val_loss"]))
    return (("fp16 GradScaler", "charlm 10M", "fp16, init scale 2^24", "-", "-", "-",
             _mb(run["peak_mem_mb"]), str(run["skipped"]),
             f"{run['val_loss']:.4f}",
             "PASS: skipped the overflowing steps, trained on" if ok else
             f"FAIL: {run['status']}, {run['skipped']} skipped")), ok


def peak_reset_row(seen: dict) -> tuple[tuple, bool]:
    """A 10M run after the 85M runs in this process must report the 10M peak again."""
    again = one_run(CASES["10M"], "bf16")
    small, large = seen.get(("10M", "bf16")), seen.get(("85M", "bf16"))
    if again["status"] != "completed" or small is None or large is None:
        return (("peak memory reset", "10M after 85M", "bf16", "-", "-", "-", "-", "-", "-",
                 f"n/a: bf16 {again['status']}"), True)
    if None in (again["peak_mem_mb"], small["peak"], large["peak"]):
        return (("peak memory reset", "10M after 85M", "bf16", "-", "-", "-", "-", "-", "-",
                 "FAIL: no peak memory reported"), False)
    ok = again["peak_mem_mb"] <= 1.1 * small["peak"] and again["peak_mem_mb"] < large["peak"]
    return (("peak memory reset", "10M after 85M", "bf16", "-", "-", "-",
             f"{again['peak_mem_mb']:.0f}", "-", f"{again['val_loss']:.4f}",
             f"{'PASS' if ok else 'FAIL'}: first 10M run {small['peak']:.0f} MB, 85M "
             f"{large['peak']:.0f} MB")), ok


def nccl_row() -> tuple[tuple, bool]:
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
                                timeout=datetime.timedelta(seconds=60))
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
        return (("NCCL one rank", "-", mode, "-", "-", "-", "-", "-", "-",
                 f"FAIL: {type(exc).__name__}: {exc}"[:200]), False)
    return (("NCCL one rank", "-", mode, "-", "-", "-", "-", "-", "-",
             f"{'PASS' if ok else 'FAIL: wrong values'}: NCCL {version}"), ok)


def resume_rows(precisions: list[str]) -> list[tuple[tuple, bool]]:
    """Per precision: one epoch with a checkpoint, then a run that must resume from it."""
    from hpsearch.train import LocalSession, train
    from hpsearch.workloads import charlm

    rows = []
    for precision in precisions:
        with tempfile.TemporaryDirectory(prefix="hpsearch-gpu-resume-") as root:
            config = {**COMMON, **CASES["10M"], "precision": precision, "checkpoint_every": 1}
            before = LocalSession(root=root)
            first = train({**config, "epochs": 1}, charlm.WORKLOAD, before)
            session = LocalSession(root=root, resume_from=before.last_checkpoint)
            second = train({**config, "epochs": 2}, charlm.WORKLOAD, session)
            epochs = [r["epoch"] for r in session.reports]
            loss = session.reports[-1].get("val_loss") if session.reports else None
            ok = (first.status == second.status == "completed" and epochs == [2]
                  and loss is not None and math.isfinite(loss))
            verdict = ("PASS: resumed at epoch 2" if ok else
                       f"FAIL: {first.status}/{second.status}, epochs {epochs}")
            rows.append((("checkpoint + resume", "charlm 10M", precision, "-", "-", "-", "-",
                          "-", "-" if loss is None else f"{loss:.4f}", verdict), ok))
    return rows


def syncs_rows(precisions: list[str]) -> list[tuple[tuple, bool]]:
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
        ok = status == "completed" and per_step <= limit
        rows.append((("host syncs", "charlm 10M", precision, "-", "-", "-", "-", "-", "-",
                      f"{'PASS' if ok else 'FAIL'}: {per_step:.3f} per step ({counts[32]} in 32 "
                      f"steps, {counts[96]} in 96; at most {limit:.3f})"
                      + ("" if status == "completed" else f"; {status}")), ok))
    return rows


def share_row(storage: str) -> tuple[tuple, bool]:
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
        return (("report share", model, "bf16", "-", "-", "-", "-", "-", "-",
                 f"FAIL: {type(exc).__name__}: {exc}"[:200]), False)
    share = report_share.epoch_share(shape, batch * cost["train_s_per_sample"],
                                     val * cost["val_s_per_sample"], ckpt_s)
    total = share["report_pct"] + share["checkpoint_pct"]
    ok = total <= 5
    return (("report share", model, "bf16", f"{share['step_ms']:.1f}", "-", "-", "-", "-", "-",
             f"{'PASS' if ok else 'FAIL'}: reports {share['report_pct']:.1f}% + checkpoints "
             f"{share['checkpoint_pct']:.1f}% of a {share['epoch_s']:.0f}-s epoch ({mb:.0f} MB "
             f"in {ckpt_s:.1f} s every {shape['checkpoint_every']} epochs; goal <= 5%)"), ok)


def memory_row() -> tuple[tuple, bool]:
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()
    left = torch.cuda.memory_allocated() / 2**20
    ok = left == 0
    return (("memory left", "-", "after every check", "-", "-", "-", f"{left:.0f}", "-", "-",
             "PASS: none allocated" if ok else f"FAIL: {left:.1f} MB still allocated"), ok)


def not_covered(check: str, mode: str, why: str) -> tuple[tuple, None]:
    """A check one machine cannot make: a row of its own, never counted as passed."""
    return ((check, "-", mode, "-", "-", "-", "-", "-", "-", f"NOT COVERED: {why}"), None)


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
                          "warm_workers": True}}


def sweep_row(workers: int, precision: str, storage: str) -> tuple[tuple, bool]:
    import hpsearch
    from hpsearch.driver.sweep.run import run_sweep
    from hpsearch.space import parse_space

    label = (f"ASHA sweep, 4 x {workers} worker(s)" + (" (NCCL)" if workers > 1 else
                                                      " (in the Tune actor)"))
    marker = os.path.join(storage, f"died-{workers}w.json")
    out = io.StringIO()
    started = time.perf_counter()
    try:
        result = run_sweep(parse_space(sweep_space(f"gpu-check-{workers}w", workers=workers,
                                                   precision=precision, die_once_file=marker)),
                           storage=storage, stream=out)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        print(out.getvalue(), file=sys.stderr)
        return (("sweep", "charlm", label, "-", "-", "-", "-", "-", "-",
                 f"FAIL: {type(exc).__name__}: {exc}"[:200]), False)
    wall = time.perf_counter() - started
    trials = hpsearch.read_trials(result.sweep_dir)
    history = hpsearch.read_history(result.sweep_dir)
    statuses = trials.status.value_counts().to_dict()
    ok = (result.status == "finished" and set(statuses) <= {"completed", "stopped_by_asha"}
          and statuses.get("completed", 0) >= 1)
    notes = [", ".join(f"{n} {s}" for s, n in statuses.items()), f"{wall:.0f} s"]
    fault_ok, fault_note = survived_a_worker_death(marker, trials, history)
    ok = ok and fault_ok
    notes.append(fault_note)
    if "gpu_ids" in history:
        per_trial = history.groupby("trial_id").gpu_ids.first()
        distinct = all(len(set(ids.split(";"))) == workers for ids in per_trial)
        ok = ok and distinct
        notes.append(f"gpu_ids {sorted(set(per_trial))}" + ("" if distinct else " NOT distinct"))
    else:
        ok = False
        notes.append("no gpu_ids recorded")
    peak = history.groupby("trial_id").peak_mem_mb.max()
    if workers == 1 and "n_embd" in trials and peak.notna().all():
        sizes = trials.set_index("trial_id").n_embd
        small, large = peak[sizes == 128], peak[sizes == 384]
        if len(small) and len(large):
            reset = small.max() < large.min()
            ok = ok and reset
            notes.append(f"peak per trial reset: {'yes' if reset else 'NO'} (128: "
                         f"{small.max():.0f} MB, 384: {large.min():.0f} MB)")
    if not ok:
        print(out.getvalue(), file=sys.stderr)
    return (("sweep", "charlm", label, "-", "-", "-", _mb(peak.max() if peak.notna().any()
                                                          else None), "-",
             f"{trials.best_value.min():.4f}", ("PASS: " if ok else "FAIL: ") + "; ".join(notes)),
            ok)


def survived_a_worker_death(marker: str, trials, history) -> tuple[bool, str]:
    """Did one worker die, and did its trial go on from its checkpoint, not from scratch?"""
    if not os.path.exists(marker):
        return False, "no worker was killed (no trial reached step 30)"
    with open(marker) as f:
        died = json.load(f)
    ids = trials.trial_id[(trials.lr - died["lr"]).abs() < 1e-12 * died["lr"]]
    if len(ids) != 1:
        return False, f"the killed trial (lr {died['lr']:.3g}) is not in the table"
    row = trials.set_index("trial_id").loc[ids.iloc[0]]
    epochs = list(history[history.trial_id == ids.iloc[0]].epoch)
    ok = row.status in ("completed", "stopped_by_asha") and epochs.count(1) == 1 and \
        max(epochs) >= 2
    return ok, (f"worker of {ids.iloc[0]} killed at step 30: {row.status}, epochs {epochs}"
                + ("" if ok else " (expected one epoch 1: resumed from its checkpoint)"))


def print_table(rows: list[tuple]) -> None:
    widths = [max(len(str(r[i])) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    for row in [COLUMNS, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions")
    parser.add_argument("--no-sweeps", action="store_true", help="skip the Ray sweeps")
    parser.add_argument("--list", action="store_true", help="say what each check proves")
    args = parser.parse_args(argv)
    if args.list:
        for check, proves in CHECKS:
            print(f"{check:<20} {proves}")
        return 0

    import torch

    if not torch.cuda.is_available():
        print(f"gpu_check: no CUDA here (torch {torch.__version__}, CUDA build "
              f"{torch.version.cuda or 'none'}); nothing measured")
        return 0
    if os.environ.pop("HPSEARCH_SIMULATE_GPU", None):
        print("gpu_check: ignoring HPSEARCH_SIMULATE_GPU: this checks real GPUs")
    started = time.perf_counter()
    gpus = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0)
    capability = ".".join(map(str, torch.cuda.get_device_capability(0)))
    print(f"gpu_check: torch {torch.__version__} (CUDA {torch.version.cuda}), {gpus} x {name} "
          f"(compute capability {capability}); {args.reps} interleaved repetitions, medians")

    rows, seen = precision_rows(args.reps)
    ratio = seen.get(("85M", "bf16"), {}).get("ratio")
    rows.append(("goal", "charlm 85M", "bf16 vs fp32 strict", "-",
                 f"{ratio:.2f}x" if ratio else "-", "-", "-", "-", "-",
                 f"{'MET' if ratio and ratio >= GOAL_BF16_VS_FP32 else 'NOT MET'}: "
                 f">= {GOAL_BF16_VS_FP32}x"))
    verdicts: list[tuple[tuple, bool | None]] = [scaler_row(), peak_reset_row(seen), nccl_row()]
    ran = [precision for label, precision in MODES if ("10M", label) in seen]
    verdicts += resume_rows(ran or ["fp32"])
    verdicts += syncs_rows([p for p in ran if p in ("bf16", "fp16")] or ["fp32"])
    with tempfile.TemporaryDirectory(prefix="hpsearch-gpu-share-") as storage:
        verdicts.append(share_row(storage))
    if args.no_sweeps:
        verdicts.append(not_covered("sweep", "ASHA sweeps", "--no-sweeps"))
    else:
        precision = "bf16" if ("10M", "bf16") in seen else "fp32"
        with tempfile.TemporaryDirectory(prefix="hpsearch-gpu-check-") as storage:
            verdicts.append(sweep_row(1, precision, storage))
            verdicts.append(sweep_row(2, precision, storage) if gpus >= 2 else not_covered(
                "sweep", "ASHA sweep, 4 x 2 workers (NCCL)", "1 GPU; DDP over NCCL needs 2"))
    verdicts.append(memory_row())
    verdicts.append(not_covered("NCCL between nodes", "-", "one machine"))
    rows += [row for row, _ in verdicts]
    print()
    print_table(rows)
    summary = {"passed": sum(v is True for _, v in verdicts),
               "failed": sum(v is False for _, v in verdicts),
               "not_covered": sum(v is None for _, v in verdicts),
               "seconds": round(time.perf_counter() - started),
               "checks": [{"check": r[0], "mode": r[2], "verdict": r[-1]} for r, _ in verdicts]}
    print(f"\n{summary['seconds']} s: {summary['passed']} passed, {summary['failed']} failed, "
          f"{summary['not_covered']} NOT COVERED")
    print(json.dumps(summary))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
