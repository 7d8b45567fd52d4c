"""2-worker DDP (gloo, CPU) vs 1 worker at the same global batch: same loss curve?

Question: does the harness's data-parallel path train the same model as one process?
With the global batch fixed, each of the 2 workers takes half of every batch
(``DistributedSampler`` hands rank r the samples r, r+2, ... of the same seeded
permutation), and DDP averages their gradients, so every optimizer step should see the
same mean gradient as the single worker, up to float rounding in the all-reduce.

The script runs each workload once on 1 process and once on 2 processes (spawned, gloo,
``torch.distributed`` only, no Ray) and compares the reported ``train_loss`` and
``val_loss`` at every epoch. Tolerance: relative difference below 1e-4.

    .venv/bin/python benchmarks/ddp_equivalence.py
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TOLERANCE = 1e-4
CASES = {
    "digits": ("hpsearch.workloads.digits", {"lr": 3e-3, "epochs": 5, "batch_size": 64, "warmup_steps": 10,
                                             "weight_decay": 0.05}),
    "charlm": ("hpsearch.workloads.charlm", {"lr": 3e-3, "epochs": 3, "batch_size": 32, "samples_per_epoch": 512,
                                             "val_samples": 64, "warmup_steps": 8}),
}


def _run(name: str, rank: int, world_size: int) -> list[dict]:
    import importlib

    from hpsearch.train import LocalSession, train

    module, config = CASES[name]
    workload = importlib.import_module(module).WORKLOAD
    session = LocalSession(world_rank=rank, world_size=world_size, local_rank=rank)
    train({**config, "checkpoint_every": 0}, workload, session)
    return session.reports


def _worker(rank: int, world_size: int, root: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{root}/rendezvous", rank=rank, world_size=world_size)
    try:
        results = {name: _run(name, rank, world_size) for name in CASES}
        if rank == 0:
            torch.save(results, os.path.join(root, "ddp.pt"))
    finally:
        dist.destroy_process_group()


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), 1e-12)


def main() -> None:
    torch.set_num_threads(1)
    single = {name: _run(name, 0, 1) for name in CASES}
    with tempfile.TemporaryDirectory() as root:
        mp.start_processes(_worker, args=(2, root), nprocs=2, join=True, start_method="spawn")
        ddp = torch.load(os.path.join(root, "ddp.pt"), weights_only=False)

    print(f"torch {torch.__version__}; 1 process vs 2 gloo processes, same global batch; tolerance {TOLERANCE:g}")
    print(f"{'workload':<8} {'epoch':>5} {'train_loss 1w':>13} {'train_loss 2w':>13} {'val_loss 1w':>11} "
          f"{'val_loss 2w':>11} {'max rel diff':>12}")
    all_ok = True
    for name in CASES:
        one, two = single[name], ddp[name]
        worst = 0.0
        for a, b in zip(one, two):
            diff = max(_rel(a["train_loss"], b["train_loss"]), _rel(a["val_loss"], b["val_loss"]))
            worst = max(worst, diff)
            print(f"{name:<8} {a['epoch']:>5} {a['train_loss']:>13.6f} {b['train_loss']:>13.6f} "
                  f"{a['val_loss']:>11.6f} {b['val_loss']:>11.6f} {diff:>12.2e}")
        ok = len(one) == len(two) and worst < TOLERANCE
        all_ok &= ok
        print(f"{name:<8} {'':>5} {'worst':>13} {worst:.2e}: {'PASS' if ok else 'FAIL'}")
    raise SystemExit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
