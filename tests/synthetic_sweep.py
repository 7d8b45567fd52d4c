"""Synthetic sweeps for the report and listing tests, written with the same TrialRecords
and write_tables the driver uses: an ASHA sweep with trials that completed, were stopped
at each rung, diverged, failed, and one still running. No Ray, no torch.

Import it as ``from synthetic_sweep import make_sweep`` (pytest puts tests/ on the path)."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from hpsearch.space import parse_space
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import new_manifest, write_manifest
from hpsearch.store.records import TrialRecords
from hpsearch.store.reports import sanitize_report
from hpsearch.store.tables import write_tables

SPACE = {
    "name": "nightly-lm",
    "trainable": "digits",
    "objective": {"metric": "val_loss", "mode": "min"},
    "params": {
        "lr": {"type": "float", "low": 1.0e-4, "high": 3.0e-2, "log": True},
        "warmup_steps": {"type": "int", "low": 0, "high": 40, "step": 10},
        "precision": {"type": "categorical", "choices": ["fp32", "bf16", "fp16"]},
        "loss_scale_init": {"type": "float", "low": 1024, "high": 65536, "log": True,
                            "when": {"precision": "fp16"}},
        "batch_size": 64,
    },
    "search": {"algorithm": "tpe", "seed": 0, "n_startup_trials": 4},
    "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": 9, "grace_period": 1,
                  "reduction_factor": 3},
    "trials": {"num": 16, "max_concurrent": 2},
    "resources": {"workers": 2, "use_gpu": True, "cpus_per_worker": 1},
}
STEPS_PER_EPOCH = 22
STARTUP_S = 20.0
EPOCH_S = {"fp32": 10.0, "bf16": 14.0, "fp16": 60.0}
T0 = datetime(2026, 1, 30, 1, 0, tzinfo=timezone.utc)


def loss_at(params, epoch, shift):
    """A smooth learning curve; lr near 0.01 and fp32/bf16 are best."""
    q = abs(math.log10(params["lr"]) - math.log10(0.01)) + shift
    q += {"fp32": 0.0, "bf16": 0.05, "fp16": 0.1}[params["precision"]]
    return 0.08 + 0.4 * q + 1.5 / (epoch + 0.5)


def report(trial_id, params, epoch, value, elapsed, *, status="running", gpu_util=None):
    metrics = {
        "step": int(epoch * STEPS_PER_EPOCH), "epoch": epoch, "lr": params["lr"] * 0.9,
        "train_loss": value * 0.93 if math.isfinite(value) else math.nan,
        "val_loss": value, "val_accuracy": 1 - min(value, 3) / 3, "grad_norm": 0.7,
        "samples_per_s": {"fp32": 5200.0, "bf16": 4100.0, "fp16": 900.0}[params["precision"]],
        "peak_mem_mb": {"fp32": 812.5, "bf16": 530.0, "fp16": 611.0}[params["precision"]],
        "precision": params["precision"], "skipped_steps": 0, "status": status,
    }
    if gpu_util is not None:
        metrics["gpu_util_pct"] = gpu_util(params, epoch)
    return {**metrics, "training_iteration": epoch, "time_total_s": elapsed,
            "trial_id": trial_id, "config": dict(params), "done": False}


def make_sweep(storage: Path, name: str = "nightly-lm", *, seed: int = 0, n: int = 16,
               start: datetime = T0, space_name: str = "nightly-lm", shift: float = 0.0,
               status: str = "finished", specials: bool = True, gpu_util=None) -> SweepDir:
    """Write a synthetic ASHA sweep under ``storage/name`` and return it; ``gpu_util(params,
    epoch)``, if given, is the ``gpu_util_pct`` of each report at ``epoch``."""
    raw = {**SPACE, "name": space_name, "trials": {**SPACE["trials"], "num": n}}
    spec = parse_space(raw)
    sweep = SweepDir(Path(storage).resolve() / name)
    sweep.path.mkdir(parents=True)
    sweep.space.write_text(yaml.safe_dump(raw, sort_keys=False))
    manifest = new_manifest(name=name, argv=["hpsearch", "run", "space.yaml", "--name", name],
                            seed=0, cluster={"CPU": 4.0, "GPU": 4.0}, address=None,
                            objective={"metric": "val_loss", "mode": "min"})
    manifest["plan"] = {"slots": 2, "rungs": [1, 3]}
    rng = random.Random(seed)
    records = TrialRecords(spec)
    rung_values: dict[int, list[float]] = {1: [], 3: []}
    slots = [0.0, 0.0]
    for i in range(n):
        tid = f"{rng.getrandbits(32):08x}"
        precision = ["fp32", "bf16", "fp16"][i % 3]
        params = {"lr": 10 ** rng.uniform(-4, math.log10(3e-2)),
                  "warmup_steps": rng.choice([0, 10, 20, 30, 40]), "precision": precision}
        if precision == "fp16":
            params["loss_scale_init"] = 2.0 ** rng.randint(10, 16)
        slot = min(range(2), key=lambda s: slots[s])
        begin = slots[slot]
        records.start(tid, params)
        records.trials[tid]["started_at"] = (start + timedelta(seconds=begin)).timestamp()
        kind = "normal"
        if specials and i == 4:
            kind = "failed"
        elif specials and i == 7:
            kind = "diverged"
        elif specials and i == n - 1:
            kind = "running"
        elapsed = STARTUP_S
        stopped = False
        for epoch in range(1, 10):
            if kind == "failed":
                break
            elapsed += EPOCH_S[precision]
            if kind == "diverged" and epoch == 1:
                r = report(tid, params, epoch, math.nan, elapsed, status="diverged",
                           gpu_util=gpu_util)
                r["reason"] = "training loss became non-finite (nan) by step 22"
                records.result(tid, sanitize_report(r, spec.objective))
                break
            value = loss_at(params, epoch, shift)
            done = epoch == 9
            records.result(tid, report(tid, params, epoch, value, elapsed,
                                       status="completed" if done else "running",
                                       gpu_util=gpu_util))
            if kind == "running" and epoch == 3:
                break
            if epoch in rung_values:
                rung_values[epoch].append(value)
                ranked = sorted(rung_values[epoch])
                cut = ranked[max(len(ranked) // 3 - 1, 0)] if len(ranked) >= 3 else math.inf
                if value > cut:
                    records.stopped_by_scheduler(tid)
                    stopped = True
                    break
        if kind == "failed":
            records.end(tid, errored=True,
                        error="RuntimeError: CUDA error: out of memory\x1b[31m | <b>x</b>")
        elif kind != "running":
            records.end(tid, returned=not stopped)
        slots[slot] = begin + elapsed + 2.0
        if tid in records.trials and records.trials[tid].get("ended_at"):
            records.trials[tid]["ended_at"] = (start + timedelta(seconds=slots[slot])).timestamp()
    write_tables(records, sweep)
    manifest["status"] = status
    manifest["started_at"] = start.isoformat(timespec="seconds")
    manifest["ended_at"] = (start + timedelta(seconds=max(slots))).isoformat(timespec="seconds")
    manifest["counts"] = records.counts()
    write_manifest(sweep, manifest)
    return sweep
