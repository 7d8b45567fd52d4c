"""Trial start-up latency: from Tune starting a trial to the trial's first training step.

Question: how long does a trial wait before it trains, and where does that time go? It
compares the two ways hpsearch runs a trial:

* 1 worker: the harness trains inside the Tune trial's own process (no worker group);
* 2 workers, cold (``resources.warm_workers: false``): a Ray Train ``TorchTrainer`` per
  trial (controller actor, worker group, gloo);
* 2 workers, warm (the default): one long-lived worker group per trial slot that trains
  trial after trial; the first trial pays the group's start, the next ones do not.

Each mode runs a small sweep of short ``digits`` trials one at a time (so trials never
compete for the 2 cores) on one shared local Ray instance, through ``run_sweep`` as a user
would. The timed workload (``benchmarks/_timed.py``) stamps when the harness starts
building data (worker up, imports done, process group formed) and every training step;
the trial table gives when Tune started and ended each trial.

    .venv/bin/python benchmarks/trial_startup.py [--trials 4]

The "first" rows are the sweep's first trial, the "next" rows the median of the others
(for the warm mode: a trial on a group that is already up). ``startup_s`` is the trial
table's column (Tune's start of the trial -> its first step).
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


MODES = {"1 worker": (1, True), "2 cold": (2, False), "2 warm": (2, True)}


def space(workers: int, warm: bool, trials: int, timing_file: str) -> dict:
    return {
        "name": f"startup-{workers}w-{'warm' if warm else 'cold'}",
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
        "resources": {"workers": workers, "cpus_per_worker": 1, "warm_workers": warm},
    }


def measure(workers: int, warm: bool, trials: int, root: str) -> list[dict[str, float]]:
    from hpsearch.space import parse_space
    from hpsearch.driver.sweep.run import run_sweep
    from hpsearch.store.tables import read_trials

    timing = os.path.join(root, f"timing-{workers}-{warm}.jsonl")
    spec = parse_space(space(workers, warm, trials, timing))
    result = run_sweep(spec, storage=root, stream=io.StringIO())
    stamps = read_stamps(timing)
    rows = []
    previous_end = None
    for row in read_trials(result.sweep_dir).sort_values("started_at").itertuples():
        s = stamps[repr(row.lr)]
        start, end = row.started_at.timestamp(), row.ended_at.timestamp()
        rows.append({
            "start -> worker up": s["data"] - start,
            "worker up -> first step": s["first_step"] - s["data"],
            "start -> first step": s["first_step"] - start,
            "training": s["last_step"] - s["first_step"],
            "last step -> trial ended": end - s["last_step"],
            "startup_s (trial table)": float(row.startup_s),
            "previous ended -> first step": (s["first_step"] - previous_end
                                             if previous_end is not None else float("nan")),
        })
        previous_end = end
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    args = parser.parse_args()

    from hpsearch.driver.cluster.connect import connect

    os.chdir(Path(__file__).resolve().parents[1])  # so workers import benchmarks._timed
    conn = connect(None)
    try:
        with tempfile.TemporaryDirectory(prefix="hpsearch-bench-") as root:
            results = {m: measure(*MODES[m], args.trials, root) for m in args.modes}
    finally:
        conn.close()
    keys = list(next(iter(results.values()))[0])
    print(f"seconds, {args.trials} trials of each kind (digits, 2 epochs, one trial at a "
          f"time, {os.cpu_count()} CPUs); first trial | median of the next ones")
    print("| | " + " | ".join(f"{m}: first | {m}: next" for m in results) + " |")
    print("| --- |" + " --- | --- |" * len(results))
    for key in keys:
        cells = []
        for rows in results.values():
            nxt = [r[key] for r in rows[1:]]
            cells += [f"{rows[0][key]:.2f}", f"{statistics.median(nxt):.2f}" if nxt else "-"]
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
