"""How much of the Pareto front MO-ASHA finds (#24), replayed on a recorded curve table.

The shipped space with a second objective (``samples_per_s``, max, which the table
records at every evaluation) is searched two ways, with the very objects ``hpsearch run``
builds (:class:`~benchmarks.replay.methods.HpsearchDriver`: the multi-objective study and
TPE, and :class:`~hpsearch.driver.search.schedulers.SweepASHA`):

* ``mo-asha``: the sweep's MO-ASHA, stopping dominated trials at their rungs;
* ``mo-fifo``: the same study and sampler, every trial to ``max_t``.

Both get the same number of trials (``--trials``), 4 workers, and the replay's seeds.
The front a sweep finds is that of its completed trials (the ``pareto`` rule); it is
scored by the seed means of those trials' configurations, as in the regret of the
configuration found, against the front of every recorded configuration's seed means.
The score is the share of the reference front's hypervolume the found front covers
(2 objectives, each scaled to the table's range; the reference point is the table's worst
value of each). Also given: the worker time each spent, in time(R) units, and the share
of the reference front's configurations found exactly.

    python benchmarks/search_quality.py --front --seeds 30 --trials 24,48
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import replace
from typing import Any, Sequence

from benchmarks.replay.cli import WORKLOADS, load
from benchmarks.replay.compare import bootstrap_mean
from benchmarks.replay.methods import HpsearchDriver, replay_spec
from benchmarks.replay.simulator import simulate
from hpsearch.space.spec import Objective, pareto_front

__all__ = ["coverage", "hypervolume", "main", "run"]

SECOND = Objective("samples_per_s", "max")


def hypervolume(points: Sequence[Sequence[float]]) -> float:
    """The area two-objective ``points`` (both to be maximised, on [0, 1]) dominate above
    the origin."""
    area, height = 0.0, 0.0
    for x, y in sorted(points, key=lambda p: -p[0]):  # right to left
        if y > height:
            area += x * (y - height)
            height = y
    return area


def _scaled(table: Any, configs: Sequence[int], objectives: Sequence[Objective]
            ) -> dict[int, tuple[float, float]]:
    """Each configuration's seed-mean final values, as maximise-on-[0, 1] scores."""
    raw = {c: [table.mean_final(c, None if i == 0 else o.metric) for i, o in
               enumerate(objectives)] for c in table.params}
    good = {c: v for c, v in raw.items() if all(math.isfinite(x) for x in v)}
    out = {}
    spans = []
    for i, o in enumerate(objectives):
        scores = [-o.score(v[i]) for v in good.values()]
        spans.append((min(scores), max(scores)))
    for c in configs:
        if c in good:
            out[c] = tuple((-o.score(good[c][i]) - lo) / ((hi - lo) or 1.0)
                           for i, (o, (lo, hi)) in enumerate(zip(objectives, spans)))
    return out


def coverage(table: Any, found: Sequence[int], objectives: Sequence[Objective]) -> dict:
    """The found configurations' front against the table's: ``hv`` (share of the
    reference hypervolume) and ``exact`` (share of the reference front's configurations
    among the found front's)."""
    everything = _scaled(table, list(table.params), objectives)
    keys = list(everything)
    reference = [keys[i] for i in pareto_front([everything[k] for k in keys],
                                               [Objective("a", "max"), Objective("b", "max")])]
    mine = [c for c in dict.fromkeys(found) if c in everything]
    own = [mine[i] for i in pareto_front([everything[c] for c in mine],
                                         [Objective("a", "max"), Objective("b", "max")])]
    hv_ref = hypervolume([everything[c] for c in reference])
    return {"hv": hypervolume([everything[c] for c in own]) / hv_ref if hv_ref else math.nan,
            "exact": len(set(own) & set(reference)) / len(reference), "front": len(own)}


def run(seeds: int, trials: Sequence[int], *, workload: str = "digits", workers: int = 4
        ) -> list[dict[str, Any]]:
    """Every (method, trials, seed) replay; one result dict each."""
    spec, table, surrogate = load(*WORKLOADS[workload])
    objectives = (spec.objective, SECOND)
    out = []
    for n in trials:
        for seed in range(seeds):
            for method, scheduler in (("mo-asha", {}), ("mo-fifo", {"type": "fifo"})):
                mo = replace(replay_spec(spec, seed=seed, scheduler=scheduler),
                             more_objectives=(SECOND,))
                row = simulate(method, table, surrogate, mo, seed=seed, workers=workers,
                               budget=1e9, max_trials=n,
                               driver=HpsearchDriver(mo, workers=workers))
                done = [config for config, _, completed in row["ended"] if completed]
                out.append({"method": method, "trials": n, "seed": seed,
                            "worker_time": sum(row["worker_time"].values()),
                            "clock": row["clock"], **coverage(table, done, objectives)})
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| method | trials | seeds | hypervolume covered | reference front found | "
          "front size | worker time (x time(R)) | wall clock (x time(R)) |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted({(r["trials"], r["method"]) for r in rows}):
        group = [r for r in rows if (r["trials"], r["method"]) == key]
        hv = bootstrap_mean([r["hv"] for r in group])
        exact = bootstrap_mean([r["exact"] for r in group])
        print(f"| {key[1]} | {key[0]} | {len(group)} | {hv[0]:.3f} [{hv[1]:.3f}, {hv[2]:.3f}] "
              f"| {exact[0]:.0%} [{exact[1]:.0%}, {exact[2]:.0%}] "
              f"| {statistics.fmean(r['front'] for r in group):.1f} "
              f"| {statistics.fmean(r['worker_time'] for r in group):.1f} "
              f"| {statistics.fmean(r['clock'] for r in group):.1f} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="search_quality.py --front",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--front", action="store_true", required=True)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--trials", default="24,48", help="comma-separated trial counts")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="digits")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = run(args.seeds, [int(n) for n in args.trials.split(",")], workload=args.workload)
    print_table(rows)
    print(f"\n{len(rows)} replays in {time.monotonic() - started:.0f} s")
    return 0
