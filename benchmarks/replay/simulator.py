"""N simulated workers replaying recorded curves through one search method, without Ray.

Time is simulated, in units of time(R) (:class:`~benchmarks.replay.curves.CurveTable`):
a worker that starts a trial at ``t`` delivers its epoch ``e`` evaluation at
``t + overhead + times[config][e - 1] / time(R)``. The loop takes the earliest evaluation,
hands it to the method (:mod:`benchmarks.replay.methods`), and when the trial is stopped or
has no more evaluations, the worker asks the method for the next trial at once. A replay
ends at ``budget`` (time(R) units of wall clock), which hpsearch's driver decides with the
sweep's own stopper; trials running then are cut there.

The configuration a trial is answered with is the surrogate's nearest recorded one
(:class:`~benchmarks.replay.curves.Surrogate`), with one of its recorded training seeds
drawn by the replay's own random generator, so a replay's noise is the recording's.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.replay.curves import CurveTable, Surrogate
from benchmarks.replay.methods import REPLAY_SECONDS_PER_R, build
from hpsearch.space.spec import Spec

__all__ = ["simulate"]


@dataclass
class _Running:
    key: str
    params: dict
    config: int
    values: list[float]
    times: list[float]  # time(R) units since the trial started, per evaluation
    started: float
    precision: str
    epoch: int = 0
    accounted: float = field(default=0.0)  # worker time counted so far
    extra: dict = field(default_factory=dict)  # the run's other metrics, per epoch


def simulate(method: str, table: CurveTable, surrogate: Surrogate, spec: Spec, *, seed: int,
             workers: int = 4, budget: float = 50.0, overhead: float = 0.0,
             max_trials: int | None = None, driver: Any = None) -> dict[str, Any]:
    """Replay ``method`` on ``table`` for ``budget`` time(R) with ``workers`` workers.

    Returns one result row: ``method``, ``seed``, ``curve`` (``[t, best so far]`` at every
    improvement, ``t`` in time(R) units), ``found`` (``[t, the mean over its seeds of the
    configuration and epoch that gave that best]``: the incumbent's worth without the
    luck of its run), ``found_full`` (the same configuration's best mean over the whole
    run: what it gives when trained in full, as PASHA's users do), ``trials`` started,
    ``stopped`` early,
    ``worker_time`` by precision (time(R) units), ``ended`` (``[config, epochs, completed]``
    of each trial that ended) and the replay's own ``seconds``. ``max_trials`` starts no
    trial beyond that many (the running ones finish); ``driver`` replays a driver built
    by the caller (:mod:`benchmarks.replay.methods`) instead of ``method``'s.
    """
    clock = time.perf_counter()
    if driver is None:
        _, driver = build(method, spec, seed=seed, workers=workers)
    metric, sign = spec.objective.metric, table.sign
    rng = random.Random(f"replay-{seed}")
    queue: list[tuple[float, int, _Running]] = []
    best, curve, found, found_full, started, stopped, ended = None, [], [], [], 0, 0, []
    means: dict[int, list[float]] = {}
    order = itertools.count()  # ties in time go first come, first served
    busy: dict[str, float] = {}

    def start(now: float) -> None:
        nonlocal started
        if max_trials is not None and started >= max_trials:
            return
        got = driver.start(f"r{seed}_{started:05d}")
        if got is None:
            return
        key, params = got
        config = surrogate.nearest(params)
        run = (config, rng.choice(table.seeds[config]))
        values = table.values[run]
        times = [t / table.time_r for t in table.times[config][:len(values)]]
        trial = _Running(key, params, config, values, times, now + overhead,
                         str(params.get("precision", "-")), extra=table.extra.get(run, {}))
        started += 1
        heapq.heappush(queue, (trial.started + times[0], next(order), trial))

    def account(trial: _Running, until: float) -> None:
        spent = until - (trial.started - overhead) - trial.accounted
        trial.accounted += spent
        busy[trial.precision] = busy.get(trial.precision, 0.0) + spent

    # The method's own end of the sweep (hpsearch's stopper), else the budget.
    over = getattr(driver, "over", None) or (lambda t, budget: t > budget)
    for _ in range(workers):
        start(0.0)
    now = 0.0
    while queue and not over(queue[0][0], budget):
        now, _, trial = heapq.heappop(queue)
        account(trial, now)
        value = trial.values[trial.epoch]
        trial.epoch += 1
        if math.isfinite(value) and (best is None or sign * value < sign * best):
            best = value
            curve.append([round(now, 5), value])
            if trial.config not in means:
                means[trial.config] = table.mean_curve(trial.config)
            found.append([round(now, 5), means[trial.config][trial.epoch - 1]])
            full = [v for v in means[trial.config] if math.isfinite(v)]
            found_full.append([round(now, 5), min(full) if sign > 0 else max(full)])
        result = {metric: value, "epoch": trial.epoch, "training_iteration": trial.epoch,
                  "time_total_s": (now - trial.started + overhead) * REPLAY_SECONDS_PER_R,
                  "precision": trial.precision,
                  **{m: vs[trial.epoch - 1] for m, vs in trial.extra.items()}}
        stop = driver.report(trial.key, result)
        if stop or trial.epoch == len(trial.values):
            stopped += trial.epoch < len(trial.values)
            ended.append([trial.config, trial.epoch, trial.epoch == len(trial.values)])
            driver.end(trial.key, result)
            start(now)
        else:
            heapq.heappush(queue, (trial.started + trial.times[trial.epoch], next(order), trial))
    for _, _, trial in queue:
        account(trial, budget)
    return {"method": method, "seed": seed, "workload": table.workload, "workers": workers,
            "budget": budget, "overhead": overhead, "time_r_s": table.time_r,
            "best_in_table": table.best(), "curve": curve,
            "best_mean_in_table": table.best_mean(), "found": found,
            "found_full": found_full, "trials": started,
            "stopped": stopped, "worker_time": busy, "ended": ended, "clock": round(now, 5),
            "seconds": round(time.perf_counter() - clock, 2)}
