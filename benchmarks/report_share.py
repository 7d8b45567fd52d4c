"""What share of a ``gpu-ddp.yaml`` trial goes to reports and checkpoints instead of steps.

Question (#21): while a trial evaluates at a report, or rank 0 writes a checkpoint, every
GPU of the trial waits. At the shape ``search_spaces/gpu-ddp.yaml`` trains, is that a few
percent of the trial, or a large part of it?

One process stands for one rank (in DDP every rank does the same work per step; the
gradient all-reduce is not counted). Measured here, with the harness's own code:

* **step**: seconds per training sample, from the harness's ``samples_per_s`` of a short
  run at the shape's model (a small batch, scaled to the rank's batch: on a CPU a step's
  time grows with its batch);
* **report**: the time from the end of an epoch's last step to its report, per validation
  sample (each rank evaluates ``val_samples / workers``);
* **checkpoint**: what rank 0 does at a checkpoint: ``torch.save`` of the model, AdamW's
  moments and the generator states (the harness's :func:`hpsearch.train.checkpoint.save`),
  then the copy to the sweep's storage that Ray Train makes of every reported checkpoint
  (``--storage``: point it at the shared file system the cluster uses).

The share per epoch is ``(report + checkpoint / checkpoint_every) / (steps + those)``; it
is the share of the whole trial too, since every epoch has one report. It is given with
this CPU's step time (measured), and with a step time estimated for one GPU at
``--gpu-tflops`` achieved (6 x parameters x tokens per step; 400 is about 40% of an H200's
dense bf16 peak): the report's evaluation scales with the step, the checkpoint does not,
as it is a write to storage. ``benchmarks/gpu_check.py`` measures the same on a real GPU.
Two shapes, side by side: ``gpu-ddp.yaml`` before this issue, and as shipped.

    .venv/bin/python benchmarks/report_share.py [--storage DIR] [--reps 3] [--gpu-tflops 400]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MODEL_KEYS = ("n_layer", "n_embd", "n_head", "block_size")
#: gpu-ddp.yaml before #21: a 10.8M model, 64 x 256 tokens per GPU, a checkpoint each epoch
BEFORE = {"n_layer": 6, "n_embd": 384, "n_head": 6, "block_size": 256, "batch_size": 256,
          "samples_per_epoch": 65536, "val_samples": 256, "checkpoint_every": 1, "workers": 4}


def shipped_shape(path: Path = ROOT / "search_spaces" / "gpu-ddp.yaml") -> dict:
    """The fixed values of the shipped space, with the defaults the harness fills in."""
    from hpsearch.train.keys import HarnessConfig
    from hpsearch.workloads import charlm

    space = yaml.safe_load(path.read_text())
    fixed = {k: v for k, v in space["params"].items() if not isinstance(v, dict)}
    shape = {k: fixed.get(k, charlm.DEFAULTS.get(k)) for k in (*MODEL_KEYS, "batch_size",
                                                                "samples_per_epoch",
                                                                "val_samples")}
    shape["checkpoint_every"] = fixed.get("checkpoint_every", HarnessConfig.checkpoint_every)
    shape["workers"] = space["resources"]["workers"]
    return shape


class _Clock:
    """A session that notes when each report arrives."""

    def __init__(self):
        from hpsearch.train import LocalSession

        self.session = LocalSession(on_report=lambda _: self.at.append(time.perf_counter()))
        self.at: list[float] = []


def costs(shape: dict, *, batch: int = 2, val: int = 4, steps: int = 3, precision: str = "fp32",
          use_gpu: bool = False) -> dict:
    """Seconds per training sample and per validation sample at the shape's model, from
    two epochs of ``steps`` steps of ``batch`` samples (the second one is timed)."""
    from hpsearch.train import train
    from hpsearch.workloads import charlm

    config = {**{k: shape[k] for k in MODEL_KEYS}, "batch_size": batch,
              "samples_per_epoch": batch * steps, "val_samples": val, "epochs": 2,
              "lr": 3e-4, "warmup_steps": 0, "checkpoint_every": 0, "precision": precision,
              "corpus_bytes": 2_000_000, "use_gpu": use_gpu}
    clock = _Clock()
    result = train(config, charlm.WORKLOAD, clock.session)
    if result.status != "completed":
        raise RuntimeError(f"{precision}: {result.status}: {result.reason}")
    train_per_sample = 1 / clock.session.reports[-1]["samples_per_s"]
    report = clock.at[1] - clock.at[0] - batch * steps * train_per_sample
    return {"train_s_per_sample": train_per_sample, "val_s_per_sample": max(report, 0.0) / val}


def checkpoint_seconds(shape: dict, storage: str, device: str = "cpu") -> tuple[float, float]:
    """(seconds, MB) of one checkpoint as rank 0 makes it, with Ray Train's copy."""
    import torch

    from hpsearch.fence import remove_inside
    from hpsearch.train import checkpoint as ckpt
    from hpsearch.train.keys import HarnessConfig
    from hpsearch.train.optim import adamw
    from hpsearch.workloads import charlm

    config = {**{k: shape[k] for k in MODEL_KEYS}, "lr": 3e-4, "epochs": 1}
    model = charlm.build_model(config).to(device)
    optimizer = adamw(model, HarnessConfig.from_config(config), fused=device != "cpu")
    for p in model.parameters():  # one step, so that AdamW holds both moments
        p.grad = torch.zeros_like(p)
    optimizer.step()
    started = time.perf_counter()
    directory = ckpt.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                           "rng": [ckpt.rng_state(torch.device(device))], "step": 1})
    persisted = tempfile.mkdtemp(prefix="report-share-", dir=storage)
    try:
        shutil.copytree(directory, persisted, dirs_exist_ok=True)
        os.sync()
        seconds = time.perf_counter() - started
        size = os.path.getsize(os.path.join(persisted, ckpt.CHECKPOINT_FILE)) / 1e6
    finally:
        remove_inside(storage, persisted)  # both made by this function, a moment ago
        ckpt.discard(directory)
    return seconds, size


def per_rank(shape: dict) -> tuple[int, float]:
    """(training batch, validation samples) of one rank."""
    return shape["batch_size"] // shape["workers"], shape["val_samples"] / shape["workers"]


def epoch_share(shape: dict, step_s: float, report_s: float, checkpoint_s: float) -> dict:
    """One epoch of the shape: its steps, its report, and its part of a checkpoint."""
    every = shape["checkpoint_every"]
    ckpt = checkpoint_s / every if every else 0.0
    epoch = shape["samples_per_epoch"] // shape["batch_size"] * step_s + report_s + ckpt
    return {"step_ms": step_s * 1e3, "epoch_s": epoch, "report_pct": 100 * report_s / epoch,
            "checkpoint_pct": 100 * ckpt / epoch}


def measure(shape: dict, storage: str, *, reps: int, gpu_tflops: float) -> dict:
    """The CPU's shares, and those with a GPU's step estimated from its FLOPs."""
    from hpsearch.workloads import charlm

    params = sum(p.numel() for p in charlm.build_model(dict(shape)).parameters())
    cost = costs(shape)
    writes = [checkpoint_seconds(shape, storage) for _ in range(reps)]
    ckpt_s = statistics.median(s for s, _ in writes)
    batch, val = per_rank(shape)
    cpu_step, cpu_report = batch * cost["train_s_per_sample"], val * cost["val_s_per_sample"]
    gpu_step = 6 * params * batch * shape["block_size"] / (gpu_tflops * 1e12)
    return {"shape": shape, "params_m": params / 1e6, "checkpoint_s": ckpt_s,
            "checkpoint_mb": writes[0][1],
            "steps_per_epoch": shape["samples_per_epoch"] // shape["batch_size"],
            "cpu": epoch_share(shape, cpu_step, cpu_report, ckpt_s),
            "gpu": epoch_share(shape, gpu_step, cpu_report * gpu_step / cpu_step, ckpt_s)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=tempfile.gettempdir(),
                        help="where checkpoints are copied to, as Ray Train does")
    parser.add_argument("--reps", type=int, default=3, help="checkpoint writes per shape")
    parser.add_argument("--gpu-tflops", type=float, default=400.0,
                        help="achieved TFLOP/s of one GPU for the estimate")
    args = parser.parse_args(argv)
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; checkpoints copied to "
          f"a folder in --storage; GPU step estimated at {args.gpu_tflops:g} TFLOP/s achieved")
    rows = {name: measure(shape, args.storage, reps=args.reps, gpu_tflops=args.gpu_tflops)
            for name, shape in (("before", BEFORE), ("shipped", shipped_shape()))}
    print(f"\n{'gpu-ddp.yaml':<12} {'model':>7} {'steps/ep':>8} {'ckpt':>13} {'every':>5} "
          f"{'| CPU step':>10} {'report':>7} {'ckpt':>6} {'| GPU step':>10} {'report':>7} "
          f"{'ckpt':>6}")
    for name, r in rows.items():
        cpu, gpu = r["cpu"], r["gpu"]
        print(f"{name:<12} {r['params_m']:>6.1f}M {r['steps_per_epoch']:>8} "
              f"{r['checkpoint_mb']:>5.0f} MB {r['checkpoint_s']:>4.1f}s "
              f"{r['shape']['checkpoint_every']:>5} "
              f"| {cpu['step_ms'] / 1e3:>7.1f} s {cpu['report_pct']:>6.2f}% "
              f"{cpu['checkpoint_pct']:>5.2f}% | {gpu['step_ms']:>6.1f} ms {gpu['report_pct']:>6.2f}% "
              f"{gpu['checkpoint_pct']:>5.2f}%")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
