"""bf16 and fp16 vs fp32 on the CPU: step time and loss of charlm under the harness.

Question: on a CPU, does mixed precision (``torch.autocast`` on the CPU, plus the fp16
GradScaler) make training faster, and what does it do to the loss?

Each run trains charlm for 2 short epochs through ``hpsearch.train.train``; the step
time comes from the harness's own ``samples_per_s`` of the second epoch (the first one
warms up allocators and kernels; evaluation is excluded). Precisions are interleaved
within every repetition so that machine load hits them alike; the table shows medians
and the median of the per-repetition ratios to fp32.

    .venv/bin/python benchmarks/precision_cpu.py [--reps 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from hpsearch.train import LocalSession, train
from hpsearch.workloads import charlm

PRECISIONS = ("fp32", "bf16", "fp16")
CPU_CASES = {
    "charlm 0.12M": {"n_layer": 2, "n_embd": 64, "n_head": 4, "block_size": 64, "batch_size": 32,
                     "samples_per_epoch": 512},
    "charlm 3.2M": {"n_layer": 4, "n_embd": 256, "n_head": 4, "block_size": 128, "batch_size": 16,
                    "samples_per_epoch": 128},
}


def one_run(case: dict, precision: str, *, use_gpu: bool) -> dict:
    config = {"lr": 3e-3, "epochs": 2, "warmup_steps": 4, "val_samples": 64, "checkpoint_every": 0,
              "precision": precision, "use_gpu": use_gpu, **case}
    session = LocalSession()
    result = train(config, charlm.WORKLOAD, session)
    if result.status != "completed":
        return {"status": result.status, "reason": result.reason}
    last = session.reports[-1]
    return {"status": "completed", "samples_per_s": last["samples_per_s"], "val_loss": last["val_loss"],
            "skipped": last["skipped_steps"], "peak_mem_mb": last["peak_mem_mb"]}


def compare(cases: dict, *, reps: int, use_gpu: bool) -> None:
    header = (f"{'case':<14} {'precision':<9} {'ms/step':>8} {'vs fp32':>8} {'min..max':<12} {'val_loss':>8} "
              f"{'skipped':>7} {'peak MB':>8}")
    print(header)
    for name, case in cases.items():
        one_run(case, "fp32", use_gpu=use_gpu)  # warm the corpus cache and the kernels
        runs = {p: [] for p in PRECISIONS}
        for rep in range(reps):
            order = PRECISIONS if rep % 2 == 0 else PRECISIONS[::-1]
            for precision in order:
                runs[precision].append(one_run(case, precision, use_gpu=use_gpu))
        batch = case["batch_size"]
        base = [r["samples_per_s"] for r in runs["fp32"]]
        for precision in PRECISIONS:
            done = [r for r in runs[precision] if r["status"] == "completed"]
            if len(done) < len(runs[precision]):
                r = runs[precision][0]
                print(f"{name:<14} {precision:<9} {r['status']}: {r.get('reason')}")
                continue
            speed = [r["samples_per_s"] for r in done]
            ratios = [b / s for s, b in zip(speed, base)]  # time ratio: > 1 means slower than fp32
            ms = 1000 * batch / statistics.median(speed)
            peak = done[-1]["peak_mem_mb"]
            peak = "-" if peak is None else f"{peak:.0f}"
            print(f"{name:<14} {precision:<9} {ms:>8.2f} {statistics.median(ratios):>7.2f}x "
                  f"{min(ratios):.2f}..{max(ratios):.2f}  {statistics.median(r['val_loss'] for r in done):>8.4f} "
                  f"{done[-1]['skipped']:>7} {peak:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU, {args.threads} thread(s), {args.reps} interleaved repetitions; "
          "ms/step of the second epoch, evaluation excluded")
    compare(CPU_CASES, reps=args.reps, use_gpu=False)


if __name__ == "__main__":
    main()
