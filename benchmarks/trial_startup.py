"""Trial start-up latency: from Tune starting a trial to the trial's first training step.

Question: how long does a trial wait before it trains, and where does that time go? It
compares the two ways hpsearch runs a trial:

* 1 worker: the harness trains inside the Tune trial's own process (no worker group);
* 2 workers: a Ray Train ``TorchTrainer`` (controller actor, worker group, gloo).

Each mode runs a small sweep of short ``digits`` trials one at a time (so trials never
compete for the 2 cores) on one shared local Ray instance, through ``run_sweep`` as a user
would. The timed workload (``benchmarks/_timed.py``) stamps when the harness starts
building data (worker up, imports done, process group formed) and every training step;
the trial table gives when Tune started and ended each trial.

    .venv/bin/python benchmarks/trial_startup.py [--trials 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timed import read_stamps  # noqa: E402


def space(workers: int, trials: int, timing_file: str) -> dict:
    return {
        "name": f"startup-{workers}w",
        "trainable": "benchmarks._timed:WORKLOAD",
        "objective": {"metric": "val_loss", "mode": "min"},
        "params": {
            "lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
            "batch_size": 64,
            "timing_file": timing_file,
        },
        "search": {"algorithm": "random", "seed": workers},
        "scheduler": {"type": "fifo", "time_attr": "epoch", "max_t": 2},
        "trials": {"num": trials, "max_concurrent": 1},
        "resources": {"workers": workers, "cpus_per_worker": 1},
    }


def measure(workers: int, trials: int, root: str) -> list[dict[str, float]]:
    from hpsearch.space import parse_space
    from hpsearch.driver.sweep import run_sweep
    from hpsearch.store.tables import read_trials

    timing = os.path.join(root, f"timing-{workers}.jsonl")
    spec = parse_space(space(workers, trials, timing))
    result = run_sweep(spec, storage=root, stream=io.StringIO())
    stamps = read_stamps(timing)
    rows = []
    for row in read_trials(result.sweep_dir).itertuples():
        s = stamps[repr(row.lr)]
        start, end = row.started_at.timestamp(), row.ended_at.timestamp()
        rows.append({
            "start -> worker up": s["data"] - start,
            "worker up -> first step": s["first_step"] - s["data"],
            "start -> first step": s["first_step"] - start,
            "training": s["last_step"] - s["first_step"],
            "last step -> trial ended": end - s["last_step"],
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()

    from hpsearch.driver.connect import connect

    os.chdir(Path(__file__).resolve().parents[1])  # so workers import benchmarks._timed
    conn = connect(None)
    try:
        with tempfile.TemporaryDirectory(prefix="hpsearch-bench-") as root:
            results = {w: measure(w, args.trials, root) for w in (1, 2)}
    finally:
        conn.close()
    keys = list(results[1][0])
    print(f"median seconds over {args.trials} trials of each kind "
          f"(digits, 2 epochs, one trial at a time, {os.cpu_count()} CPUs)")
    print(f"{'':28s}{'1 worker (in-process)':>24s}{'2 workers (Ray Train)':>24s}")
    for key in keys:
        a, b = (statistics.median(r[key] for r in results[w]) for w in (1, 2))
        print(f"{key:28s}{a:24.2f}{b:24.2f}")
    a, b = (statistics.median(r["start -> first step"] for r in results[w]) for w in (1, 2))
    print(f"\nstart latency, 2-worker / 1-worker: {b / a:.1f}x")


if __name__ == "__main__":
    main()
