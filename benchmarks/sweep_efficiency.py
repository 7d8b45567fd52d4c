"""Sweep efficiency: sweep wall-clock / ideal, where ideal = sum of per-trial training
time / slots.

Question: how much of a sweep's wall-clock is spent not training (trial start-up and
tear-down, scheduling, Tune's bookkeeping)? Goal: within 1.05x of ideal for 30-second
trials.

A calibration run measures a ``digits`` epoch on this machine, then a FIFO sweep of trials
sized to ``--trial-seconds`` runs through ``run_sweep`` as a user's would, for 1-worker
trials (trained inside the Tune trial's process) and 2-worker DDP trials, cold (a Ray Train
run per trial, ``resources.warm_workers: false``) and warm (one worker group per slot,
reused trial after trial; its first start is counted). 2-worker trials get twice the
epochs, so their training also lasts about ``--trial-seconds``. Training
time per trial is first to last training step, stamped by ``benchmarks/_timed.py``. Sweep
wall-clock is from the first trial's start to the last trial's end, so starting Ray itself
is not counted (it is printed separately).

    .venv/bin/python benchmarks/sweep_efficiency.py [--trial-seconds 30] [--trials 4] \
        [--modes 1 "2 cold" "2 warm"]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timed import read_stamps  # noqa: E402


def epoch_seconds() -> float:
    from benchmarks._timed import WORKLOAD
    from hpsearch.train import LocalSession, train

    import torch

    torch.set_num_threads(1)
    config = {"lr": 3e-3, "epochs": 1, "batch_size": 64, "checkpoint_every": 0}
    train(config, WORKLOAD, LocalSession())  # warm-up: data, kernels
    t = time.perf_counter()
    train({**config, "epochs": 5}, WORKLOAD, LocalSession())
    return (time.perf_counter() - t) / 5


MODES = {"1": (1, True), "2 cold": (2, False), "2 warm": (2, True)}


def run(workers: int, warm: bool, trials: int, epochs: int, root: str) -> dict[str, float]:
    from hpsearch.space import parse_space
    from hpsearch.driver.sweep.run import run_sweep
    from hpsearch.store.tables import read_trials

    timing = os.path.join(root, f"timing-{workers}-{warm}.jsonl")
    spec = parse_space({
        "name": f"efficiency-{workers}w-{'warm' if warm else 'cold'}",
        "trainable": "benchmarks._timed:WORKLOAD",
        "objective": {"metric": "val_loss", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
                   "batch_size": 64, "timing_file": timing, "checkpoint_every": 0},
        "search": {"algorithm": "random", "seed": workers},
        "scheduler": {"type": "fifo", "time_attr": "epoch", "max_t": epochs},
        "trials": {"num": trials},
        "resources": {"workers": workers, "cpus_per_worker": 1, "warm_workers": warm},
    })
    result = run_sweep(spec, storage=root, stream=io.StringIO())
    table = read_trials(result.sweep_dir)
    stamps = read_stamps(timing)
    training = sum(stamps[repr(lr)]["last_step"] - stamps[repr(lr)]["first_step"]
                   for lr in table.lr)
    wall = (table.ended_at.max() - table.started_at.min()).total_seconds()
    ideal = training / result.plan.slots
    return {"slots": result.plan.slots, "trials": len(table),
            "mean trial training s": training / len(table), "wall s": wall,
            "ideal s": ideal, "wall / ideal": wall / ideal,
            "median startup_s": float(table.startup_s.median())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trial-seconds", type=float, default=30.0)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--epochs-2w", type=int, default=None,
                        help="epochs of a 2-worker trial (default: twice the 1-worker "
                             "calibration, which is far too many on 2 loaded cores: gloo's "
                             "all-reduce makes a 2-worker digits step ~10x a 1-thread one)")
    args = parser.parse_args()

    os.chdir(Path(__file__).resolve().parents[1])  # so workers import benchmarks._timed
    per_epoch = epoch_seconds()
    epochs = max(1, round(args.trial_seconds / per_epoch))

    from hpsearch.driver.cluster.connect import connect

    t = time.perf_counter()
    conn = connect(None)
    ray_start = time.perf_counter() - t
    try:
        with tempfile.TemporaryDirectory(prefix="hpsearch-bench-") as root:
            rows = {m: run(*MODES[m], args.trials,
                           epochs if MODES[m][0] == 1 else (args.epochs_2w or 2 * epochs), root)
                    for m in args.modes}
    finally:
        conn.close()
    print(f"digits epoch {per_epoch * 1000:.0f} ms on 1 thread -> {epochs} epochs a trial "
          f"(~{args.trial_seconds:g} s); starting Ray took {ray_start:.1f} s (not counted)")
    keys = list(next(iter(rows.values())))
    print("| | " + " | ".join(f"{m} worker(s)" for m in rows) + " |")
    print("| --- |" + " --- |" * len(rows))
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{rows[m][key]:.2f}" for m in rows) + " |")


if __name__ == "__main__":
    main()
