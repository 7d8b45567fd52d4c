"""``search_quality.py --simulate``: replay many seeds of many methods, and ``--table``.

    python benchmarks/search_quality.py --simulate --seeds 30 \\
        --methods hpsearch,ray-stock,random-asha --out sq-sim.jsonl
    python benchmarks/search_quality.py --table sq-sim.jsonl

``--seeds N`` replays seeds ``0 .. N-1`` of each method; ``--workload`` picks the recorded
table and the space file that searches it. Each (method, seed) appends one JSON line to
``--out`` as it finishes, and those already there are skipped, so a long comparison can be
stopped and run again.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: ``--workload`` -> (the space file, the curve table).
WORKLOADS = {
    "digits": ("search_spaces/quickstart.yaml", "benchmarks/data/curves-digits.parquet"),
    "charlm": ("search_spaces/charlm.yaml", "benchmarks/data/curves-charlm.parquet"),
    # held out from the choice of defaults (#38): a GRU, benchmarks/workloads/running_sum.py
    "running-sum": ("benchmarks/workloads/running_sum.yaml",
                    "benchmarks/data/curves-running-sum.parquet"),
}

_loaded: dict[str, Any] = {}


def load(space: str, curves: str) -> tuple[Any, Any, Any]:
    """The spec, the curve table and the surrogate (once per process)."""
    key = f"{space}|{curves}"
    if key not in _loaded:
        from benchmarks.replay.curves import CurveTable, Surrogate
        from hpsearch.driver.search.space import distributions
        from hpsearch.space import load_space

        spec = load_space(str(ROOT / space))
        table = CurveTable.read(ROOT / curves, names=tuple(p.name for p in spec.params),
                                mode=spec.objective.mode, max_t=spec.scheduler.max_t)
        _loaded[key] = (spec, table, Surrogate(table, distributions(spec)))
    return _loaded[key]


def _one(job: tuple[str, int, dict[str, Any]]) -> dict[str, Any]:
    from benchmarks.replay.simulator import simulate

    method, seed, opts = job
    spec, table, surrogate = load(opts["space"], opts["curves"])
    row = simulate(method, table, surrogate, spec, seed=seed, workers=opts["workers"],
                   budget=opts["budget"], overhead=opts["overhead"])
    return {**row, "space": opts["space"], "table": opts["curves"]}


def run(methods: list[str], seeds: int, opts: dict[str, Any], out: Path, *, procs: int = 1,
        say: Any = print) -> list[dict[str, Any]]:
    """Replay every (method, seed) missing from ``out``; returns the new rows."""
    from benchmarks.replay.compare import read_rows

    done = {(r["method"], r["seed"]) for r in read_rows(out)} if out.exists() else set()
    jobs = [(m, s, opts) for s in range(seeds) for m in methods if (m, s) not in done]
    rows = []
    pool = mp.get_context("spawn").Pool(procs) if procs > 1 else None
    try:
        results = pool.imap_unordered(_one, jobs) if pool else map(_one, jobs)
        for row in results:
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            rows.append(row)
            say(f"{row['method']:12s} seed {row['seed']:2d}: best {row['curve'][-1][1]:.4f} at "
                f"{row['curve'][-1][0]:.2f}x, {row['trials']} trials ({row['seconds']:.1f} s)")
    finally:
        if pool:
            pool.close()
            pool.join()
    return rows


def table(path: str) -> None:
    """Print the comparison of a results file."""
    from benchmarks.replay.compare import print_table, read_rows
    from benchmarks.replay.curves import surrogate_error
    from benchmarks.replay.methods import METHODS

    rows = read_rows(path)
    spec, curves, surrogate = load(rows[0]["space"], rows[0]["table"])
    values = [v for vs in curves.values.values() for v in vs if v == v]
    worst = max(values) if curves.mode == "min" else min(values)
    target = curves.target()
    err = surrogate_error(curves, surrogate)
    first = rows[0]
    extra = [
        f"{curves.workload}: {len(curves.params)} configurations, {len(curves.values)} runs; "
        f"time(R) {curves.time_r:.3f} s; best in table {curves.best():.4f}; target {target:.4f} "
        f"(the top 2% of configurations); {first['workers']} workers, overhead "
        f"{first['overhead']:g}x per trial",
        f"surrogate (nearest neighbour; distance weights "
        f"{', '.join(f'{n} {w:g}' for n, w in zip(surrogate.numeric, surrogate.weights))}), "
        f"{err['n']} configurations held out: final-value error "
        f"mean {err['mae']:.4f}, median {err['median_ae']:.4f}; rank correlation "
        f"{err['rank_rho']:.3f}; seed noise sd {err['seed_sd']:.4f}, spread between "
        f"configurations sd {err['spread_sd']:.4f}",
    ]
    print_table(rows, worst=worst, target=target, sign=curves.sign,
                labels={m: f"{m}: {METHODS[m][0]}" for m in METHODS}, extra=extra)


def main(argv: list[str]) -> int:
    from benchmarks.replay.methods import METHODS, parse_method, unavailable

    parser = argparse.ArgumentParser(prog="search_quality.py --simulate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", required=True)
    parser.add_argument("--seeds", type=int, default=30, help="replay seeds 0 .. N-1")
    parser.add_argument("--methods", default="hpsearch,ray-stock,random-asha",
                        help=f"comma-separated, of: {', '.join(METHODS)} (or all); a method "
                        "may change settings: hpsearch@search.n_startup_trials=16")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="digits")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--budget", type=float, default=50.0, help="in units of time(R)")
    parser.add_argument("--overhead", type=float, default=0.0,
                        help="start-up per trial, in units of time(R)")
    parser.add_argument("--procs", type=int, default=1, help="replays at once")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    methods = list(METHODS) if args.methods == "all" else args.methods.split(",")
    for method in methods:
        try:
            parse_method(method)
        except ValueError as exc:
            parser.error(str(exc))
    missing: dict[str, list[str]] = {}  # what is not installed -> the methods that need it
    for method in methods:
        if need := unavailable(method):
            missing.setdefault(need, []).append(method)
    lines = [f"{', '.join(ms)}: {need}" for need, ms in missing.items()]
    if lines and args.methods != "all":
        parser.exit(2, "".join(f"{line}\n" for line in lines))
    for line in lines:  # all: the methods that can run here
        print(f"skipped {line}")
    methods = [m for m in methods if not unavailable(m)]
    space, curves = WORKLOADS[args.workload]
    opts = {"space": space, "curves": curves, "workers": args.workers, "budget": args.budget,
            "overhead": args.overhead}
    started = time.monotonic()
    rows = run(methods, args.seeds, opts, args.out, procs=args.procs)
    print(f"{len(rows)} replays in {time.monotonic() - started:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
