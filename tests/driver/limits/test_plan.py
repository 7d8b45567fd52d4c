"""Fitting trials onto a cluster: pure functions over hand-made resource dicts."""

import pytest

from hpsearch.driver.limits.plan import (
    asha_expected_units, make_plan, plan_slots, simulated_asha_units,
)
from hpsearch.errors import ClusterError
from hpsearch.space.spec import (
    FloatParam, Objective, Resources, Scheduler, Spec, Trials,
)


def make_spec(*, workers=1, cpus=1.0, gpu=False, gpus=0.0, num=8, max_concurrent="auto",
              scheduler=None):
    return Spec(
        name="t", trainable="digits", objective=Objective("val_loss", "min"),
        params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
        scheduler=scheduler or Scheduler(max_t=9, grace_period=1, reduction_factor=3),
        trials=Trials(num=num, max_concurrent=max_concurrent),
        resources=Resources(workers=workers, use_gpu=gpu, cpus_per_worker=cpus,
                            gpus_per_worker=gpus),
    )


def test_one_worker_trials_fill_every_cpu():
    assert plan_slots(make_spec(), {"CPU": 2.0}) == 2


def test_multi_worker_trials_count_every_worker():
    spec = make_spec(workers=2)
    assert spec.resources.per_trial() == {"CPU": 2}
    assert plan_slots(spec, {"CPU": 2.0}) == 1
    assert plan_slots(spec, {"CPU": 5.0}) == 2


def test_gpu_trials_are_bounded_by_gpus():
    spec = make_spec(workers=2, gpu=True, gpus=1)
    assert plan_slots(spec, {"CPU": 64.0, "GPU": 8.0}) == 4


def test_slots_never_exceed_the_number_of_trials():
    assert plan_slots(make_spec(num=3), {"CPU": 64.0}) == 3


def test_cluster_too_small_for_one_trial_names_both_sides():
    with pytest.raises(ClusterError) as err:
        plan_slots(make_spec(workers=2, gpu=True, gpus=1), {"CPU": 16.0})
    msg = str(err.value)
    assert "2 GPU" in msg and "0 GPU" in msg


def test_explicit_max_concurrent_beyond_capacity_is_refused():
    with pytest.raises(ClusterError, match="does not fit"):
        plan_slots(make_spec(max_concurrent=4), {"CPU": 2.0})
    assert plan_slots(make_spec(max_concurrent=1), {"CPU": 2.0}) == 1
    assert plan_slots(make_spec(), {"CPU": 8.0}, requested=3) == 3


def ray_asha_units(spec, quality):
    """Worker-epochs Ray's own ASHA spends on trials run one after another, each reporting
    at every epoch the value ``quality`` (higher is better, so mode max)."""
    from types import SimpleNamespace

    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    s = spec.scheduler
    asha = ASHAScheduler(time_attr="epoch", metric="q", mode="max", max_t=s.max_t,
                         grace_period=s.grace_period, reduction_factor=s.reduction_factor)
    units = 0
    for i, q in enumerate(quality):
        trial = SimpleNamespace(trial_id=str(i))
        asha.on_trial_add(None, trial)
        for epoch in range(1, s.max_t + 1):
            action = asha.on_trial_result(None, trial, {"epoch": epoch, "q": q})
            if action == TrialScheduler.STOP:
                break
        units += epoch
    return units * spec.resources.workers


@pytest.mark.parametrize("seed", range(20))
def test_the_plans_asha_model_stops_exactly_the_trials_ray_asha_stops(seed):
    import random

    spec = make_spec(num=24)
    rng = random.Random(seed)
    quality = [rng.random() for _ in range(24)]  # 24 distinct values, in a random order
    assert len(set(quality)) == 24
    units = simulated_asha_units(spec, quality, slots=1)
    assert units == ray_asha_units(spec, quality)
    assert units < 24 * spec.scheduler.max_t  # some trials were stopped early


def test_asha_estimate_is_above_the_nominal_rate_as_real_sweeps_were():
    # 24 trials, rungs 1 and 3 of max_t 9: 1/rf per rung would be 24 x 2.33 = 56 epochs;
    # ASHA lets early trials through, and real charlm sweeps of this shape ran 78-124.
    mean, low, high = asha_expected_units(make_spec(num=24))
    assert 70 <= mean <= 90 and low < mean < high
    plan = make_plan(make_spec(num=9), {"CPU": 2.0})
    assert plan.rungs == (1, 3) and plan.worst_units == 81 and plan.slots == 2
    assert plan.asha_units == asha_expected_units(make_spec(num=9), slots=2)[0]


def test_a_sweep_of_many_trials_is_estimated_at_once_from_a_scaled_sample():
    # 100,000 trials simulated 200 times took minutes (`run --dry-run` hung); the cost per
    # trial has settled long before, so the estimate scales a sample's.
    import time

    from hpsearch.driver.limits.plan import SIMULATED_TRIALS

    sample = asha_expected_units(make_spec(num=SIMULATED_TRIALS), sweeps=40)
    started = time.process_time()
    big = asha_expected_units(make_spec(num=100 * SIMULATED_TRIALS), sweeps=40)
    assert time.process_time() - started < 30  # minutes before; about a second now
    assert big == tuple(pytest.approx(100 * v) for v in sample)
    nominal = 100 * SIMULATED_TRIALS * (1 + 2 / 3 + 6 / 9)  # 1/rf continuing at each rung
    assert nominal < big[0] < 1.2 * nominal




def test_a_trial_that_fits_on_one_node_is_planned_and_placed_on_one_node():
    from hpsearch.driver.limits.plan import placement

    two_gpu_trial = make_spec(workers=2, gpu=True, gpus=1.0)
    nodes = [{"CPU": 8.0, "GPU": 3.0}, {"CPU": 8.0, "GPU": 3.0}]
    cluster = {"CPU": 16.0, "GPU": 6.0}
    assert plan_slots(two_gpu_trial, cluster) == 3  # by totals: one would straddle nodes
    assert plan_slots(two_gpu_trial, cluster, nodes=nodes) == 2  # node by node
    assert placement(two_gpu_trial, nodes) == "STRICT_PACK"
    plan = make_plan(two_gpu_trial, cluster, nodes=nodes)
    assert plan.placement == "STRICT_PACK"
    assert "placement    each trial on one node (STRICT_PACK)" in plan.lines(two_gpu_trial)
    # Four GPUs a trial: no node has them, so the trial spreads, counted by totals.
    four = make_spec(workers=4, gpu=True, gpus=1.0)
    assert placement(four, nodes) == "PACK" and plan_slots(four, cluster, nodes=nodes) == 1
    assert any("larger than any node" in ln for ln in make_plan(four, cluster, nodes=nodes)
               .lines(four))


def test_the_runner_places_its_workers_as_planned(tmp_path):
    from dataclasses import replace

    from ray.train import RunConfig

    from hpsearch.driver.trials.runners import TrainRunner

    runner = TrainRunner(make_spec(workers=2), n_workers=2)
    config = RunConfig(name="t", storage_path=str(tmp_path))
    for strategy in ("STRICT_PACK", "PACK"):
        trainer = replace(runner, placement=strategy).trainer(lambda c: None, {},
                                                              run_config=config)
        assert trainer.scaling_config.placement_strategy == strategy


@pytest.mark.parametrize("resources, trials, expected", [
    # gpu-ddp.yaml's shape: 4 GPUs; a hang and one retry of 10 min each: 80 GPU-minutes
    ({"workers": 4, "use_gpu": True}, {}, (4, 20.0, 2.0, 80.0)),
    # a cold trial may start max_failures + 1 times if its group never connects
    ({"workers": 4, "use_gpu": True, "warm_workers": False}, {"max_failures": 4},
     (4, 20.0, 5.0, 80.0)),
    # no retry at all: one timeout
    ({"workers": 2, "use_gpu": True, "collective_timeout": "5m"}, {"max_failures": 0},
     (2, 5.0, 2.0, 10.0)),
    ({"workers": 2}, {}, (2, 20.0, 2.0, 40.0)),  # CPU workers
])
def test_the_plan_states_what_a_hung_trial_can_cost_at_most(resources, trials, expected):
    from hpsearch.driver.limits.plan import hang_cost
    from hpsearch.space import parse_space

    raw = {"name": "x", "trainable": "digits",
           "objective": {"metric": "val_loss", "mode": "min"}, "params": {"lr": 0.01},
           "resources": resources, "trials": {"num": 4, **trials}}
    spec = parse_space(raw)
    cost = hang_cost(spec)
    assert (cost["devices"], cost["hang_min"], cost["connect_min"],
            cost["hang_device_min"]) == expected
    lines = make_plan(spec, {"CPU": 64, "GPU": 16}).lines(spec)
    hang = [line for line in lines if line.startswith("a hang")]
    assert len(hang) == 1 and f"at most {expected[3]:g} " in hang[0]
    one = parse_space({**raw, "resources": {"workers": 1, "use_gpu": True}})
    assert hang_cost(one) is None  # one worker, no collectives
    assert not [line for line in make_plan(one, {"CPU": 64, "GPU": 16}).lines(one)
                if line.startswith("a hang")]
