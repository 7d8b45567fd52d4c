"""Fitting trials onto a cluster: pure functions over hand-made resource dicts."""

import pytest

from hpsearch.driver.plan import asha_expected_units, make_plan, plan_slots
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


def test_asha_expected_cost_follows_rungs():
    # rungs 1, 3 with rf 3, max_t 9: 1 + (3-1)/3 + (9-3)/9 epochs per trial.
    spec = make_spec(num=9)
    assert asha_expected_units(spec) == pytest.approx(9 * (1 + 2 / 3 + 6 / 9), rel=1e-3)
    plan = make_plan(spec, {"CPU": 2.0})
    assert plan.rungs == (1, 3) and plan.worst_units == 81 and plan.slots == 2
