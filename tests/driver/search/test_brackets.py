"""Asynchronous Hyperband brackets (``scheduler.brackets``) stop what Ray's
``AsyncHyperBandScheduler(brackets=N)`` stops, given the same bracket for each trial.

Ray draws a trial's bracket in ``on_trial_add`` with ``np.random.choice(N, p=softmax)``
from numpy's global random state; hpsearch draws it from the trial's key and
``search.seed`` (:func:`~hpsearch.driver.search.rungs.bracket_draw`). To make Ray put
each trial where hpsearch puts it, the test seeds numpy's global state right before each
``on_trial_add`` with a seed whose first uniform draw falls in the middle of hpsearch's
bracket's share (``choice`` with ``p`` draws one ``random_sample()`` and takes the
bracket whose cumulative share passes it). That only lands in the right bracket if
Ray's softmax shares are the ones hpsearch computes, so the comparison checks the shares
too. Ray's bracket is then seen only through its decisions: every report of random
sequences, for min and max, is compared. No Ray cluster: schedulers are plain objects.

The shapes have ``max_t`` on a rung (``grace_period * rf**k``) or no report able to jump
from below the last rung to ``max_t``: otherwise one bracket differs from Ray already
(Ray's ``on_trial_complete`` records a report at ``max_t`` at the last rung a trial
skipped; hpsearch's ASHA records nothing at or past ``max_t``), which is not this test's.
"""

from __future__ import annotations

import numpy as np
import pytest
from ray.tune.schedulers import AsyncHyperBandScheduler

from hpsearch.driver.record.study import RecordedTrial
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.rungs import Brackets, Rungs, bracket_draw
from hpsearch.driver.search.schedulers import SweepASHA, rung_values
from hpsearch.driver.limits.plan import simulated_asha_units
from hpsearch.errors import SpaceError
from hpsearch.space import parse_space
from .test_rungs import STOP, decisions, interrupted_halfway, random_events


def spec_for(mode, *, max_t=27, grace=1, rf=3, brackets=3, seed=0, objectives=None):
    raw = {
        "name": "r", "trainable": "digits", "objective": {"metric": "v", "mode": mode},
        "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
        "search": {"seed": seed},
        "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": max_t,
                      "grace_period": grace, "reduction_factor": rf, "brackets": brackets},
    }
    if objectives:
        raw["objective"] = objectives
    return parse_space(raw)


def numpy_seed_in(low: float, high: float) -> int:
    """A seed of numpy's global state whose first ``random_sample()`` is in the middle half
    of ``[low, high)``."""
    width = high - low
    for seed in range(100_000):
        if low + width / 4 <= np.random.RandomState(seed).random_sample() < high - width / 4:
            return seed
    raise AssertionError(f"no seed draws into [{low}, {high})")


class RayInOurBrackets(AsyncHyperBandScheduler):
    """Ray's scheduler, each trial added right after numpy is seeded to draw the bracket
    ``ours`` assigns it (the module docstring). Only public calls of Ray's class."""

    def __init__(self, spec, ours: Brackets):
        s = spec.scheduler
        super().__init__(time_attr="epoch", metric="v", mode=spec.objective.mode,
                         max_t=s.max_t, grace_period=s.grace_period,
                         reduction_factor=s.reduction_factor, brackets=s.brackets)
        bounds = np.concatenate([[0.0], np.cumsum(ours.shares)])
        self.seeds = [numpy_seed_in(bounds[i], bounds[i + 1]) for i in range(s.brackets)]
        self.ours = ours

    def on_trial_add(self, tune_controller, trial):
        np.random.seed(self.seeds[self.ours.index(trial.config["hpsearch_trial_id"])])
        super().on_trial_add(tune_controller, trial)


def both(spec, events):
    ours = SweepASHA(spec, SweepRecord.in_memory(spec))
    return decisions(ours, events), decisions(RayInOurBrackets(spec, ours.rungs), events,
                                              add=True), ours


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("seed", range(10))
def test_brackets_decide_every_report_as_rays_async_hyperband(mode, seed):
    spec = spec_for(mode, seed=seed)
    events = random_events(seed, trials=60, max_t=27)
    ours, theirs, asha = both(spec, events)
    assert ours == theirs
    used = {asha.rungs.index(key) for key, *_ in events}
    assert used == {0, 1, 2}, "the sequence never puts a trial in every bracket"
    assert any(d == STOP and t < 27 for _, t, d in ours), "the sequence never tests a stop"
    # the brackets change decisions: one bracket of the same rungs decides otherwise
    one = spec_for(mode, seed=seed, brackets=1)
    assert decisions(SweepASHA(one, SweepRecord.in_memory(one)), events) != ours


@pytest.mark.parametrize("grace, rf, max_t, brackets", [(1, 2, 16, 4), (2, 3, 20, 2),
                                                        (1, 4, 30, 2), (2, 2, 32, 3)])
def test_other_bracket_shapes_decide_as_rays_async_hyperband(grace, rf, max_t, brackets):
    for mode in ("min", "max"):
        spec = spec_for(mode, max_t=max_t, grace=grace, rf=rf, brackets=brackets)
        for seed in range(3):
            ours, theirs, _ = both(spec, random_events(200 + seed, trials=20, max_t=max_t))
            assert ours == theirs


def test_each_bracket_starts_one_rung_later_and_gets_rays_softmax_share():
    b = Brackets(grace_period=1, max_t=27, reduction_factor=3, brackets=3, mode="min")
    assert [r.milestones for r in b.brackets] == [(1, 3, 9), (3, 9), (9,)]
    total = 1 + np.e ** -1 + np.e ** -2  # softmax of the sizes 3, 2, 1
    assert b.shares == pytest.approx([1 / total, np.e ** -1 / total, np.e ** -2 / total])
    keys = [f"r0_{i:05d}" for i in range(3000)]
    counts = np.bincount([b.index(k) for k in keys], minlength=3) / len(keys)
    assert counts == pytest.approx(b.shares, abs=0.03)


def test_a_trials_bracket_depends_on_its_key_and_the_seed_only():
    keys = [f"t{i}" for i in range(40)]
    first = Brackets(grace_period=1, max_t=27, reduction_factor=3, brackets=3, mode="max")
    again = Brackets(grace_period=1, max_t=27, reduction_factor=3, brackets=3, mode="max")
    assert [first.index(k) for k in keys] == [again.index(k) for k in reversed(keys)][::-1]
    other = Brackets(grace_period=1, max_t=27, reduction_factor=3, brackets=3, mode="max",
                     seed=1)
    assert [first.index(k) for k in keys] != [other.index(k) for k in keys]
    assert 0 <= bracket_draw("t1", 0) < 1
    # the sweep's scheduler draws with the space's search.seed
    swept = SweepASHA(spec_for("max", seed=1), None).rungs
    assert [swept.index(k) for k in keys] == [other.index(k) for k in keys]


def test_one_bracket_is_todays_asha():
    asha = SweepASHA(spec_for("min", brackets=1), None)
    assert type(asha.rungs) is Rungs and asha.rungs.milestones == (1, 3, 9)


# --- a resumed sweep ----------------------------------------------------------------------


def test_seeded_brackets_decide_as_if_the_sweep_had_never_stopped():
    """The first half of the reports, then the driver dies; its trials come back under new
    Tune ids in another order. The brackets rebuilt from the study (each trial's values at
    every rung of ``scheduler.rungs()``, as the study stores them) put each trial back in
    its bracket and decide the rest as the uninterrupted scheduler does."""
    spec = spec_for("min")
    events = [e for e in random_events(11, trials=24, max_t=27) if e[3] == "result"]
    expected, first, half, before, rest = interrupted_halfway(spec, events)
    study = []  # every value a trial reached at a rung of any bracket, as the study has it
    for i, key in enumerate(sorted({e[0] for e in events}, reverse=True)):
        own = first.rungs.bracket(key)
        at = {int(m): -own.recorded[m][key] for m in own.milestones if key in own.recorded[m]}
        reached = [(t, v) for k, t, v, _ in events[:half] if k == key]
        for m in spec.scheduler.rungs():  # rungs of other brackets: the study has them too
            past = [v for t, v in reached if t >= m]
            if m not in at and past:
                at[m] = past[0]
        study.append(RecordedTrial(trial_id=key, number=i, state=None, status=None,
                                   params={}, intermediate=at))
    seeded = SweepASHA(spec, SweepRecord.in_memory(spec),
                       seeded=rung_values(study, spec.scheduler.rungs()))
    after = decisions(seeded, rest)
    assert after == expected[len(before):]
    assert decisions(SweepASHA(spec, SweepRecord.in_memory(spec)), rest) != after


def test_the_planners_estimate_follows_each_trials_bracket():
    """A trial in bracket 2 (first rung 9) runs 9 units before it can be stopped: the
    estimate of the same sweep is larger with brackets than with one bracket."""
    quality = [((i * 7919) % 1000) / 1000 for i in range(300)]
    one = simulated_asha_units(spec_for("max", brackets=1), quality, slots=4)
    three = simulated_asha_units(spec_for("max", brackets=3), quality, slots=4)
    assert three > one * 1.2


# --- validation ---------------------------------------------------------------------------


def message(**kwargs) -> str:
    with pytest.raises(SpaceError) as caught:
        spec_for("min", **kwargs)
    return str(caught.value)


def test_brackets_must_leave_every_bracket_a_rung_below_max_t():
    spec_for("min", max_t=27, brackets=3)  # rungs 1, 3, 9: bracket 2 starts at 9
    text = message(max_t=9, brackets=3)  # rungs 1, 3: bracket 2 would start at 9 = max_t
    assert "scheduler.brackets: must be <= 2, the rungs below max_t (9)" in text
    assert "(got 3)" in text
    assert "scheduler.brackets: must be >= 1 (got 0)" in message(brackets=0)
    assert "scheduler.brackets: expected an integer" in message(brackets=1.5)


def test_several_objectives_refuse_brackets_in_one_line():
    objectives = [{"metric": "v", "mode": "min"}, {"metric": "w", "mode": "max"}]
    text = message(brackets=2, objectives=objectives)
    assert "scheduler.brackets: several objectives are stopped by MO-ASHA, one bracket: " \
           "set it to 1 (got 2)" in text
    spec_for("min", brackets=1, objectives=objectives)


def test_a_space_that_leaves_brackets_out_gets_two_where_its_rungs_allow_and_keeps_them():
    def spec_without(**changes):
        raw = {"name": "r", "trainable": "digits", "objective": {"metric": "v", "mode": "min"},
               "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
               "scheduler": {"type": "asha", "max_t": 9, "grace_period": 1,
                             "reduction_factor": 3}}
        for key, value in changes.items():
            raw[key] = {**raw[key], **value} if isinstance(value, dict) else value
        return parse_space(raw)

    spec = spec_without()  # rungs 1 and 3 below max_t 9
    assert spec.scheduler.brackets == 2 and spec.raw["scheduler"]["brackets"] == 2
    rungs = SweepASHA(spec, record=SweepRecord.in_memory(spec)).rungs
    assert isinstance(rungs, Brackets) and [b.milestones for b in rungs.brackets] == [(1, 3),
                                                                                      (3,)]
    assert spec_without(scheduler={"max_t": 3}).scheduler.brackets == 1  # one rung: 1
    assert spec_without(scheduler={"type": "fifo"}).scheduler.brackets == 1
    several = spec_without(objective=[{"metric": "v", "mode": "min"},
                                      {"metric": "w", "mode": "max"}])
    assert several.scheduler.brackets == 1 and several.raw["scheduler"]["brackets"] == 1
    assert spec_without(scheduler={"brackets": 1}).scheduler.brackets == 1  # as written


def test_a_sweep_made_before_brackets_had_a_default_resumes_with_one(tmp_path):
    import yaml

    from hpsearch.driver.sweep.run import _resumed_spec
    from hpsearch.store.layout import SweepDir

    made = spec_for("min", max_t=9, brackets=1).raw
    del made["scheduler"]["brackets"]  # an older hpsearch wrote the space as the user did
    sweep = SweepDir.at(tmp_path, "older")
    sweep.path.mkdir(parents=True)
    sweep.space.write_text(yaml.safe_dump(made))
    assert _resumed_spec(sweep, trials=None, time_budget=None,
                         deadline=None)[0].scheduler.brackets == 1
    made["scheduler"]["brackets"] = 2  # this hpsearch writes the default it resolved
    sweep.space.write_text(yaml.safe_dump(made))
    assert _resumed_spec(sweep, trials=None, time_budget=None,
                         deadline=None)[0].scheduler.brackets == 2
