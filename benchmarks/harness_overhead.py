"""Harness step time vs a plain PyTorch loop on the same model and data.

Question: what does ``hpsearch.train.train`` cost on top of the loop a user would write by
hand? Goal: at most 1.03x.

The plain loop below does the same work, nanoGPT style: the same per-epoch shuffle
(``randperm`` seeded by ``seed + epoch``), AdamW with the same parameter groups, the same
warmup + cosine learning rate, gradient clipping, a running training loss kept on the
device, and one evaluation per epoch with the same metric. Both runs start from the same
seed, and the script checks that they end with the same validation loss, so the two sides
really do the same arithmetic. The harness runs through a ``LocalSession`` with
checkpoints off (``checkpoint_every: 0``); everything else is its normal path.

Repetitions alternate harness and plain runs so that load from other processes hits both
alike; the table shows the median time of each, the median of the per-pair ratios, and
the ratio of the fastest runs (the least disturbed ones), by the wall clock and by this
process's CPU time.

    .venv/bin/python benchmarks/harness_overhead.py [--reps 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from hpsearch.train import LocalSession, lr_at, train
from hpsearch.workloads import charlm, digits

CASES = {
    # name: (workload, config); the budget keeps each run around a second or two.
    "digits": (digits.WORKLOAD, {"lr": 3e-3, "epochs": 30, "batch_size": 64, "warmup_steps": 20,
                                 "weight_decay": 0.01}),
    "charlm": (charlm.WORKLOAD, {"lr": 3e-3, "epochs": 1, "batch_size": 32, "samples_per_epoch": 1024,
                                 "val_samples": 64, "warmup_steps": 8, "weight_decay": 0.01}),
}


def _batch(dataset, idx):
    if hasattr(dataset, "get_batch"):
        return dataset.get_batch(idx)
    return tuple(t[idx] for t in dataset.tensors)


def plain_loop(config: dict, workload) -> float:
    """The hand-written loop; returns the last validation loss."""
    seed, lr, b, epochs = config.get("seed", 0), config["lr"], config["batch_size"], config["epochs"]
    torch.manual_seed(seed)
    train_set, val_set = workload.build_data(config)
    model = workload.build_model(config)
    torch.manual_seed(seed)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": config["weight_decay"]},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=lr,
    )
    steps_per_epoch = len(train_set) // b
    total = epochs * steps_per_epoch
    step, val_loss = 0, float("nan")
    for epoch in range(epochs):
        if hasattr(train_set, "set_epoch"):
            train_set.set_epoch(epoch)
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(seed + epoch))
        loss_sum = torch.zeros(())
        model.train()
        for i in range(steps_per_epoch):
            x, y = _batch(train_set, order[i * b:(i + 1) * b])
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, lr=lr, warmup_steps=config["warmup_steps"], total_steps=total,
                                    min_lr=lr / 10)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.detach()
            step += 1
        train_loss = loss_sum.item() / steps_per_epoch  # noqa: F841 (what a user would log)
        model.eval()
        with torch.no_grad():
            total_loss, n = torch.zeros(()), 0
            for idx in torch.arange(len(val_set)).split(b):
                x, y = _batch(val_set, idx)
                logits = model(x)
                total_loss += F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)) * len(idx)
                workload.metrics(logits, (x, y))
                n += len(idx)
            val_loss = total_loss.item() / n
    return val_loss


def harness(config: dict, workload) -> float:
    session = LocalSession()
    train({**config, "checkpoint_every": 0}, workload, session)
    return session.reports[-1]["val_loss"]


def measure(name: str, reps: int) -> dict:
    workload, config = CASES[name]
    harness(config, workload), plain_loop(config, workload)  # warm caches (data, kernels)
    wall = {"harness": [], "plain": []}
    cpu = {"harness": [], "plain": []}
    losses = {}
    for rep in range(reps):
        order = ("harness", "plain") if rep % 2 == 0 else ("plain", "harness")
        for side in order:
            fn = harness if side == "harness" else plain_loop
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            losses[side] = fn(config, workload)
            wall[side].append(time.perf_counter() - start_wall)
            cpu[side].append(time.process_time() - start_cpu)
    steps = config["epochs"] * (len(workload.build_data(config)[0]) // config["batch_size"])
    out = {"name": name, "steps": steps, "same_result": abs(losses["harness"] - losses["plain"]) < 1e-5}
    for clock, times in (("wall", wall), ("cpu", cpu)):
        ratios = [h / p for h, p in zip(times["harness"], times["plain"])]
        out[clock] = {
            "plain_ms": 1000 * statistics.median(times["plain"]) / steps,
            "harness_ms": 1000 * statistics.median(times["harness"]) / steps,
            "ratio": statistics.median(ratios),
            "range": (min(ratios), max(ratios)),
            "best": min(times["harness"]) / min(times["plain"]),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.reps} interleaved repetitions")
    print("ms/step = median run time (evaluation included) / optimizer steps; ratio = median of the")
    print("harness/plain ratios of the pairs; best = fastest harness run / fastest plain run")
    print(f"{'workload':<8} {'clock':<5} {'steps':>5} {'plain ms/step':>13} {'harness ms/step':>15} {'ratio':>6}  "
          f"{'min..max':<12} {'best':>5}  same result")
    for name in args.cases:
        r = measure(name, args.reps)
        for clock in ("wall", "cpu"):
            m = r[clock]
            lo, hi = m["range"]
            print(f"{r['name']:<8} {clock:<5} {r['steps']:>5} {m['plain_ms']:>13.3f} {m['harness_ms']:>15.3f} "
                  f"{m['ratio']:>6.3f}  {lo:.3f}..{hi:.3f} {m['best']:>5.3f}  {'yes' if r['same_result'] else 'NO'}")


if __name__ == "__main__":
    main()
