"""What a sweep will do, before it does it: slots, rungs and worst-case cost.

Pure apart from :func:`local_resources`, which reads this machine's CPU/GPU counts the way
a local Ray instance would, without starting Ray or importing torch.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Mapping

from hpsearch.cluster import plan_slots, trial_demand
from hpsearch.space.spec import Spec


@dataclass(frozen=True)
class Plan:
    slots: int
    rungs: tuple[int, ...]
    demand: Mapping[str, float]
    cluster: Mapping[str, float]
    worst_units: float  # worker x time_attr units if every trial runs to max_t
    asha_units: float  # the same under ASHA's nominal promotion rate
    budget_worker_hours: float | None

    def lines(self, spec: Spec) -> list[str]:
        unit = spec.scheduler.time_attr + "s"
        res = spec.resources
        out = [
            f"trials       {spec.trials.num}, {self.slots} at once "
            f"(each: {res.workers} worker(s), {_fmt(self.demand)}; cluster: {_fmt(self.cluster)})",
            f"scheduler    {spec.scheduler.type}, max_t {spec.scheduler.max_t} {unit}"
            + (f", rungs at {unit} {', '.join(map(str, self.rungs))}" if self.rungs else ""),
            f"worst case   {self.worst_units:g} worker-{unit} "
            f"({spec.trials.num} trials x {spec.scheduler.max_t} {unit} x {res.workers} workers)",
        ]
        if spec.scheduler.type == "asha":
            out.append(f"with ASHA    ~{self.asha_units:g} worker-{unit} at its nominal stop rate")
        if self.budget_worker_hours is not None:
            out.append(
                f"time budget  {spec.budget.time_s / 3600:.3g} h -> at most "
                f"{self.budget_worker_hours:.3g} worker-hours"
            )
        return out


def _fmt(res: Mapping[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in res.items() if k in ("CPU", "GPU") and v)


def asha_expected_units(spec: Spec) -> float:
    """Worker x time units if ASHA stops all but 1/rf of the trials at each rung."""
    sched = spec.scheduler
    per_trial, done, alive = 0.0, 0, 1.0
    for rung in sched.rungs():
        per_trial += (rung - done) * alive
        done, alive = rung, alive / sched.reduction_factor
    per_trial += (sched.max_t - done) * alive
    return round(per_trial * spec.trials.num * spec.resources.workers, 2)


def make_plan(spec: Spec, cluster: Mapping[str, float], *, max_concurrent: int | None = None) -> Plan:
    slots = plan_slots(spec, cluster, requested=max_concurrent)
    worst = spec.trials.num * spec.scheduler.max_t * spec.resources.workers
    asha = asha_expected_units(spec) if spec.scheduler.type == "asha" else worst
    budget = None
    if spec.budget.time_s:
        budget = spec.budget.time_s / 3600 * slots * spec.resources.workers
    return Plan(slots, spec.scheduler.rungs(), trial_demand(spec), dict(cluster), worst, asha, budget)


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
