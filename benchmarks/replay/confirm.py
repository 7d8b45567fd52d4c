"""The replay on real Ray: ``hpsearch run`` with the replay trainable, to check the simulator.

Each (method, seed) is one real sweep (``hpsearch run`` in a subprocess, a local Ray
instance of its own) of a space file written here: the shipped space's parameters and
scheduler, the method's search settings, 4 trials at once, and as the trainable the
command ``benchmarks/replay/trial.py``, which answers each trial from the curve table in
real time scaled to ``--seconds-per-r`` seconds per time(R). The sweep's own tables are
then read back into a result row of the simulator's format (``curve`` and ``found`` in
time(R) units from the first trial's start), with ``"real": true`` and the method named
``<method>@ray``. A method may carry settings as in the replay
(``hpsearch@scheduler.progressive=true``); they go into the space file, which hpsearch
validates as any other. ``overhead`` is the worker time that went to no recorded training
(Tune starting and stopping trials, the command's start, gaps between trials) per trial
started, in time(R) units: replay the simulator with that ``--overhead`` to compare like
with like.

    python benchmarks/search_quality.py --confirm --seeds 3 --methods hpsearch,random-asha \\
        --seconds-per-r 3 --budget 10 --out sq-ray.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.replay.cli import ROOT, WORKLOADS, load
from benchmarks.replay.methods import METHODS, HpsearchDriver, parse_method

__all__ = ["confirm", "row_from_sweep"]


def space_text(method: str, seed: int, *, space: str, spec: Any, book: Path,
               seconds_per_r: float, workers: int) -> str:
    """The space file of one real replay of ``method`` (an hpsearch method, with any
    ``@section.field=value`` settings: :func:`~benchmarks.replay.methods.parse_method`)
    of ``space``."""
    import yaml

    raw = yaml.safe_load((ROOT / space).read_text())
    name, settings = parse_method(method)
    _, changes, driver = METHODS[name]
    if driver is not HpsearchDriver:
        raise SystemExit(f"--confirm runs hpsearch's own methods; {name} is not one")
    change = changes(spec)
    for section, values in settings.items():
        change[section] = {**change.get(section, {}), **values}
    searched = [n for n, p in raw["params"].items() if isinstance(p, dict)]
    command = [sys.executable, str(ROOT / "benchmarks/replay/trial.py"), "--book", str(book),
               "--seconds-per-r", str(seconds_per_r), "--seed", "{seed}", "--sweep-seed", str(seed),
               "--metric", spec.objective.metric]
    for param in searched:
        command += [f"--param={param}={{{param}}}"]  # one word: left out when not sampled
    doc = {
        "name": sweep_name(method, seed),
        "trainable": {"command": command},
        "objective": raw["objective"],
        "params": {n: raw["params"][n] for n in searched},
        "search": {**raw["search"], "seed": seed, **change.get("search", {})},
        "scheduler": {**raw["scheduler"], **change.get("scheduler", {})},
        "trials": {"num": 1000, "max_concurrent": workers},
        "resources": {"workers": 1, "use_gpu": False, "cpus_per_worker": 0.5},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def sweep_name(method: str, seed: int) -> str:
    """The sweep (and file) name of one real replay: the method with its settings, in the
    characters a sweep name allows."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", f"replay-{method}-{seed}")


def row_from_sweep(sweep: Path, *, method: str, seed: int, metric: str, table: Any,
                   surrogate: Any, seconds_per_r: float, budget: float,
                   workers: int) -> dict[str, Any]:
    """A simulator-format result row from a finished real sweep's tables."""
    import hpsearch

    trials = hpsearch.read_trials(sweep).set_index("trial_id")
    history = hpsearch.read_history(sweep)
    if "evaluated" in history:
        history = history[history["evaluated"].fillna(True).astype(bool)]
    t0 = trials["started_at"].min()
    names = list(table.names)
    events, trained, started, stopped, busy = [], 0.0, 0, 0, {}
    for trial_id, rows in history.groupby("trial_id"):
        trial = trials.loc[trial_id]
        config = surrogate.nearest({n: trial[n] for n in names})
        start = (trial["started_at"] - t0).total_seconds() / seconds_per_r
        if start > budget:
            continue
        started += 1
        stopped += trial["status"] == "stopped_by_asha"
        means, last = table.mean_curve(config), 0
        finite = [m for m in means if math.isfinite(m)]
        full = min(finite) if table.sign > 0 else max(finite)  # trained in full: its best
        for _, r in rows.iterrows():
            at = start + r["time_total_s"] / seconds_per_r
            if at <= budget:
                events.append((at, float(r[metric]), means[int(r["epoch"]) - 1], full))
                last = max(last, int(r["epoch"]))
        trained += table.times[config][last - 1] / table.time_r if last else 0.0
        spent = min(budget, start + float(rows["time_total_s"].max()) / seconds_per_r) - start
        precision = str(trial.get("precision", "-"))
        busy[precision] = busy.get(precision, 0.0) + max(0.0, spent)
    best, curve, found, found_full = None, [], [], []
    for at, value, mean, full in sorted(events):
        if math.isfinite(value) and (best is None or table.sign * value < table.sign * best):
            best = value
            curve.append([round(at, 5), value])
            found.append([round(at, 5), mean])
            found_full.append([round(at, 5), full])
    return {"method": f"{method}@ray", "seed": seed, "real": True, "workload": table.workload,
            "workers": workers, "budget": budget, "seconds_per_r": seconds_per_r,
            "overhead": round(max(0.0, workers * budget - trained) / max(1, started), 4),
            "time_r_s": table.time_r, "best_in_table": table.best(), "curve": curve,
            "best_mean_in_table": table.best_mean(), "found": found,
            "found_full": found_full, "trials": started,
            "stopped": int(stopped), "worker_time": busy}


def confirm(methods: list[str], seeds: int, *, workload: str, seconds_per_r: float,
            budget: float, workers: int, out: Path) -> list[dict[str, Any]]:
    """Run every (method, seed) missing from ``out`` as a real sweep; returns the rows."""
    space, curves = WORKLOADS[workload]
    spec, table, surrogate = load(space, curves)
    done = set()
    if out.exists():
        done = {(r["method"], r["seed"]) for r in map(json.loads, out.read_text().splitlines())}
    work = Path(tempfile.mkdtemp(prefix="hpsearch-replay-"))
    book = work / "book.pkl"
    with book.open("wb") as f:
        pickle.dump((table, surrogate), f)
    rows = []
    for seed in range(seeds):
        for method in methods:
            if (f"{method}@ray", seed) in done:
                continue
            space_file = work / f"{sweep_name(method, seed)}.yaml"
            space_file.write_text(space_text(method, seed, space=space, spec=spec, book=book,
                                             seconds_per_r=seconds_per_r, workers=workers))
            clock = time.monotonic()
            subprocess.run([sys.executable, "-m", "hpsearch", "run", str(space_file),
                            "--storage", str(work / "runs"),
                            "--time-budget", f"{math.ceil(budget * seconds_per_r + 10)}s"],
                           check=False, env={**os.environ, "PYTHONPATH": str(ROOT)},
                           stdout=subprocess.DEVNULL)
            row = row_from_sweep(work / "runs" / sweep_name(method, seed), method=method,
                                 seed=seed, metric=spec.objective.metric, table=table, surrogate=surrogate,
                                 seconds_per_r=seconds_per_r, budget=budget, workers=workers)
            row.update(space=space, table=curves, seconds=round(time.monotonic() - clock, 1))
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            rows.append(row)
            print(f"{row['method']:16s} seed {seed}: best {row['curve'][-1][1]:.4f} at "
                  f"{row['curve'][-1][0]:.2f}x, {row['trials']} trials, overhead "
                  f"{row['overhead']:.2f}x ({row['seconds']:.0f} s)", flush=True)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="search_quality.py --confirm",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--confirm", action="store_true", required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--methods", default="hpsearch,random-asha")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="digits")
    parser.add_argument("--seconds-per-r", type=float, default=3.0)
    parser.add_argument("--budget", type=float, default=10.0, help="in units of time(R)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    confirm(args.methods.split(","), args.seeds, workload=args.workload,
            seconds_per_r=args.seconds_per_r, budget=args.budget, workers=args.workers,
            out=args.out)
    return 0
