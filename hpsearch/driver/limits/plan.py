"""What a sweep will do, before it does it: slots, rungs and worst-case cost.

Tune does not count Ray Train's workers, so the number of concurrent trials must be
derived here from the cluster's resources and each trial's demand; otherwise extra trials
start trainers that wait for workers forever. Pure apart from :func:`local_resources`,
which reads this machine's CPU/GPU counts the way a local Ray instance would, without
starting Ray or importing torch. :func:`plan_slots` is tested with hand-made resource
dicts.
"""

from __future__ import annotations

import glob
import math
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from hpsearch.errors import ClusterError
from hpsearch.space.spec import Spec

__all__ = ["Plan", "asha_expected_units", "hang_cost", "local_resources", "make_plan",
           "placement", "plan_slots", "simulated_asha_units"]

#: Attempts of one trial that may hang for a whole collective timeout (one retry), and
#: failed starts of a warm group before it is given up
#: (``hpsearch.driver.trials.runners.HangLedger``, ``hpsearch.driver.trials.pool``).
HUNG_ATTEMPTS = 2


def hang_cost(spec: Spec) -> dict[str, float] | None:
    """What one hung multi-worker trial can hold at most, in minutes of its devices
    (GPUs, or workers on CPUs): ``hang_min`` for a collective that hangs mid-training
    (an attempt, and one retry, each until ``resources.collective_timeout``),
    ``connect_min`` for a group whose ranks never connect (each start until
    ``resources.first_collective_timeout``: a cold trial's ``trials.max_failures + 1``
    attempts, a warm group's two starts), ``devices`` the trial's GPUs (or workers).
    Start-up and retraining from the last checkpoint come on top. ``None`` for
    one-worker trials, which make no collectives.

    Example:
        >>> from hpsearch.space import parse_space
        >>> spec = parse_space({"name": "x", "trainable": "digits",
        ...     "objective": {"metric": "val_loss", "mode": "min"},
        ...     "params": {"lr": 0.01}, "resources": {"workers": 4, "use_gpu": True}})
        >>> hang_cost(spec)
        {'devices': 4, 'hang_min': 20.0, 'connect_min': 2.0, 'hang_device_min': 80.0}
    """
    res = spec.resources
    if res.workers <= 1:
        return None
    devices = res.workers * ((res.gpus_per_worker or 1) if res.use_gpu else 1)
    attempts = spec.trials.max_failures + 1
    hang_min = min(HUNG_ATTEMPTS, attempts) * res.collective_timeout_s / 60
    starts = HUNG_ATTEMPTS if res.warm_workers else attempts
    connect_min = starts * res.first_collective_timeout_s / 60
    return {"devices": devices, "hang_min": hang_min, "connect_min": connect_min,
            "hang_device_min": max(hang_min, connect_min) * devices}


@dataclass(frozen=True)
class Plan:
    slots: int
    rungs: tuple[int, ...]
    demand: Mapping[str, float]
    cluster: Mapping[str, float]
    worst_units: float  # worker x time_attr units if every trial runs to max_t
    asha_units: float  # the same under ASHA, as simulated (asha_expected_units)
    budget_worker_hours: float | None
    asha_range: tuple[float, float] | None = None  # 10th-90th percentile of the simulation
    #: How a multi-worker trial's workers are placed: ``STRICT_PACK`` (one node) or ``PACK``.
    placement: str = "STRICT_PACK"
    #: What the sweep may hold on its storage, and what is free (``hpsearch.driver.sweep.storage``).
    storage: str | None = None

    def lines(self, spec: Spec) -> list[str]:
        unit = spec.scheduler.unit
        res = spec.resources
        out = [
            f"trials       {spec.trials.num}, {self.slots} at once "
            f"(each: {res.workers} worker(s), {_fmt_used(self.demand)}; cluster: {_fmt_used(self.cluster)})",
            f"scheduler    {spec.scheduler.type}, max_t {spec.scheduler.max_t} {unit}"
            + (f", rungs at {unit} {', '.join(map(str, self.rungs))}" if self.rungs else "")
            + (f", {spec.scheduler.brackets} brackets" if spec.scheduler.type == "asha"
               and spec.scheduler.brackets > 1 else "")
            + (", progressive (PASHA: trials end at the second rung until rankings change)"
               if spec.scheduler.progressive else ""),
            f"worst case   {self.worst_units:g} worker-{unit} "
            f"({spec.trials.num} trials x {spec.scheduler.max_t} {unit} x {res.workers} workers)",
        ]
        if spec.scheduler.type == "asha":
            spread = ""
            if self.asha_range is not None and self.asha_range[0] != self.asha_range[1]:
                spread = f", {self.asha_range[0]:g}-{self.asha_range[1]:g} in 8 of 10 sweeps"
            out.append(f"with ASHA    ~{self.asha_units:g} worker-{unit}{spread} (more when "
                       "the search improves as it goes"
                       + ("; PASHA: this at most" if spec.scheduler.progressive else "") + ")")
        if res.workers > 1:
            out.append("placement    each trial on one node (STRICT_PACK)"
                       if self.placement == "STRICT_PACK" else
                       "placement    a trial is larger than any node: its workers spread over "
                       "nodes and all-reduce over the network (PACK)")
        cost = hang_cost(spec) if spec.command is None else None
        if cost is not None:
            kind = "GPU" if res.use_gpu else "worker"
            out.append(
                f"a hang       at most {cost['hang_device_min']:.3g} {kind}-minutes per trial "
                f"({cost['hang_min']:.3g} min x {cost['devices']:g} {kind}s: a hung "
                "collective is retried once, each until resources.collective_timeout; a "
                f"group that cannot connect fails in {cost['connect_min']:.3g} min)")
        if spec.command is not None:
            out.append(f"command      {_example_command(spec)}")
        if self.storage is not None:
            out.append(self.storage)
        if self.budget_worker_hours is not None:
            out.append(
                f"time budget  {spec.budget.time_s / 3600:.3g} h -> at most "
                f"{self.budget_worker_hours:.3g} worker-hours"
            )
        return out


def _example_command(spec: Spec) -> str:
    """The command of a trial at the space's midpoint (``hpsearch trial``'s config)."""
    from hpsearch.command.template import render

    values = {**spec.trial_config(spec.default_config()), "trial_dir": "<trial_dir>",
              "max_t": spec.scheduler.max_t, "trial_id": "<trial_id>"}
    values.setdefault("seed", "<seed>")
    return " ".join(render(spec.command.argv, values, optional=spec.conditional)) + \
        "  (at the midpoint)"


def _fmt_used(res: Mapping[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in res.items() if k in ("CPU", "GPU") and v)


def _fits(demand: Mapping[str, float], resources: Mapping[str, float]) -> int:
    """How many of ``demand`` fit in ``resources``."""
    return min((math.floor(resources.get(res, 0.0) / need + 1e-9)
                for res, need in demand.items() if need), default=0)


def placement(spec: Spec, nodes: Sequence[Mapping[str, float]] | None) -> str:
    """``STRICT_PACK`` when a whole trial fits on one node (its workers all-reduce over
    the node's own links, never the network), else ``PACK`` (it must spread)."""
    if nodes is None or any(_fits(spec.resources.per_trial(), n) >= 1 for n in nodes):
        return "STRICT_PACK"
    return "PACK"


def plan_slots(
    spec: Spec, cluster: Mapping[str, float], *, requested: int | None = None,
    nodes: Sequence[Mapping[str, float]] | None = None,
) -> int:
    """How many trials can run at once on ``cluster`` (Ray resource dict).

    Args:
        spec: The validated space.
        cluster: Total resources, e.g. ``ray.cluster_resources()``.
        requested: An explicit ``max_concurrent`` (flag or file), checked against what fits.
        nodes: Each node's resources. A trial that fits on one node runs on one node, so
            the slots are counted node by node (two nodes of 3 CPUs hold two 2-CPU trials,
            not three); a trial larger than every node spreads over the cluster's totals.

    Raises:
        ClusterError: Not even one trial fits, or ``requested`` exceeds what fits.
    """
    demand = spec.resources.per_trial()
    fits = _fits(demand, cluster)
    if nodes and placement(spec, nodes) == "STRICT_PACK":
        fits = min(fits, sum(_fits(demand, n) for n in nodes))
    if fits < 1:
        raise ClusterError(
            f"the cluster cannot fit one trial: each trial needs {_fmt(demand)} "
            f"({spec.resources.workers} worker(s)), but the cluster has {_fmt(cluster, demand)}. "
            "Lower resources.workers / cpus_per_worker, set use_gpu: false, "
            "or connect to a bigger cluster with --address."
        )
    fits = min(fits, spec.trials.num)
    if requested is None and spec.trials.max_concurrent != "auto":
        requested = int(spec.trials.max_concurrent)
    if requested is not None:
        if requested > fits and requested <= spec.trials.num:
            raise ClusterError(
                f"max_concurrent {requested} does not fit: {fits} trial(s) of "
                f"{_fmt(demand)} fit on a cluster with {_fmt(cluster, demand)}. "
                "Use max_concurrent: auto, or a number <= "
                f"{fits}."
            )
        return max(1, min(requested, fits))
    return fits


def _fmt(resources: Mapping[str, float], only: Mapping[str, float] | None = None) -> str:
    keys = list(only) if only is not None else ["CPU", "GPU"]
    return ", ".join(f"{resources.get(k, 0):g} {k}" for k in keys)


#: The most trials a simulated sweep has: a larger sweep is estimated from this many,
#: scaled. ASHA's cost per trial settles long before (the first trials of a rung, which
#: always continue, weigh less as the sweep grows); simulating 100,000 trials 200 times
#: took minutes, where the plan must print at once.
SIMULATED_TRIALS = 1000


def asha_expected_units(spec: Spec, *, slots: int = 1, sweeps: int = 200,
                        seed: int = 0) -> tuple[float, float, float]:
    """Worker x ``time_attr`` units ASHA spends, as Ray's ASHA really decides.

    ASHA does not stop ``1 - 1/rf`` of the trials at each rung. A trial reaching a rung is
    compared with the trials recorded there *before* it: the first one always continues,
    and it is stopped only below the ``1 - 1/rf`` quantile (linear interpolation, as
    ``numpy.nanpercentile``) of those values. Early trials therefore continue far more
    often than ``1/rf``. This simulates that rule: ``slots`` trials at once, all at the
    same speed, each with a random quality that ranks it the same way at every rung (the
    order a searcher that does not learn would give), over ``sweeps`` random sweeps.

    A sweep of more than :data:`SIMULATED_TRIALS` trials is simulated with that many and
    scaled to its size.

    Returns:
        ``(mean, 10th percentile, 90th percentile)`` over the simulated sweeps. A searcher
        that improves as it goes (TPE) sends better trials later, which continue more
        often, so real sweeps tend towards the upper end.
    """
    import random

    rng = random.Random(seed)
    n = min(spec.trials.num, SIMULATED_TRIALS)
    scale = spec.trials.num / n
    totals = sorted(
        scale * simulated_asha_units(spec, [rng.random() for _ in range(n)], slots=slots)
        for _ in range(sweeps)
    )
    mean = sum(totals) / len(totals)
    return (round(mean, 1), totals[len(totals) // 10], totals[(len(totals) * 9) // 10])


def simulated_asha_units(spec: Spec, quality: list[float], *, slots: int = 1) -> float:
    """Worker x ``time_attr`` units of one simulated ASHA sweep: trial ``i`` has quality
    ``quality[i]`` (higher is better) at every rung, trials start in order, ``slots`` at
    once, and each advances one unit per unit of time. The rule is the sweep's own
    (:func:`~hpsearch.driver.search.rules.make_rungs`: one bracket, or several). PASHA's
    is estimated as ASHA's, its most: trials of constant quality never change places, so
    its own rule would never open a rung past the second."""
    import dataclasses
    import heapq

    from hpsearch.driver.search.rules import make_rungs

    sched = dataclasses.replace(spec.scheduler, progressive=False)
    rungs = make_rungs(sched, modes=["max"], seed=spec.search.seed)
    # every bracket's rungs: a trial passes the ones of other brackets without a verdict
    milestones = [*rungs.milestones, sched.max_t]
    n = len(quality)
    events: list[tuple[float, int, int, float]] = []  # (time, trial, milestone index, start)
    started, units = 0, 0.0
    for _ in range(min(max(slots, 1), n)):
        heapq.heappush(events, (milestones[0], started, 0, 0.0))
        started += 1
    while events:
        now, trial, k, start = heapq.heappop(events)
        if k < len(rungs.milestones) and not rungs.judge(str(trial), milestones[k], quality[trial]):
            heapq.heappush(events, (start + milestones[k + 1], trial, k + 1, start))
            continue
        units += milestones[k]
        if started < n:
            heapq.heappush(events, (now + milestones[0], started, 0, now))
            started += 1
    return units * spec.resources.workers


def make_plan(spec: Spec, cluster: Mapping[str, float], *, max_concurrent: int | None = None,
              nodes: Sequence[Mapping[str, float]] | None = None) -> Plan:
    slots = plan_slots(spec, cluster, requested=max_concurrent, nodes=nodes)
    worst = spec.trials.num * spec.scheduler.max_t * spec.resources.workers
    asha, spread = worst, None
    if spec.scheduler.type == "asha":
        asha, low, high = asha_expected_units(spec, slots=slots)
        spread = (low, high)
    budget = None
    if spec.budget.time_s:
        budget = spec.budget.time_s / 3600 * slots * spec.resources.workers
    return Plan(slots, spec.scheduler.rungs(), spec.resources.per_trial(), dict(cluster), worst,
                asha, budget, spread, placement=placement(spec, nodes))


def local_resources() -> dict[str, float]:
    """CPUs and GPUs a local Ray instance would see on this machine."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out = {"CPU": float(cpus or 1)}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    else:
        gpus = len(glob.glob("/dev/nvidia[0-9]*"))
    if gpus:
        out["GPU"] = float(gpus)
    return out
