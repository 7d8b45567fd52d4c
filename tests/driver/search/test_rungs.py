"""ASHA's rule as hpsearch applies it stops exactly what Ray Tune's ASHA stops.

Each test feeds the same report sequences (distinct values, several arrival orders, ties
with the cut-off, min and max) to Ray's own ``ASHAScheduler`` and to hpsearch's
(:class:`SweepASHA` over :class:`Rungs`) and compares every decision. No Ray
cluster: schedulers are plain objects.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from hpsearch.driver.search.ids import TRIAL_ID_KEY
from hpsearch.driver.search.rungs import Rungs, milestones_of
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.schedulers import SweepASHA, rung_values
from hpsearch.driver.record.study import RecordedTrial
from hpsearch.space import parse_space

STOP, GO = TrialScheduler.STOP, TrialScheduler.CONTINUE


def spec_for(mode, *, max_t=9, grace=1, rf=3):
    return parse_space({
        "name": "r", "trainable": "digits", "objective": {"metric": "v", "mode": mode},
        "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
        "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": max_t,
                      "grace_period": grace, "reduction_factor": rf, "brackets": 1},
    })


def tune_trial(key, *, tune_id=None):
    """A Tune trial as schedulers see it: Tune's id and the config hpsearch gave it."""
    return SimpleNamespace(trial_id=tune_id or key, config={TRIAL_ID_KEY: key})


def decisions(scheduler, events, *, add=False):
    """Feed ``events`` (``(key, t, value, kind)``; kind ``result`` or ``complete``) to a
    scheduler; returns the decision for each result. A trial gets no event after STOP."""
    trials, out, stopped = {}, [], set()
    for key, t, value, kind in events:
        if key in stopped:
            continue
        if key not in trials:
            trials[key] = tune_trial(key)
            if add:
                scheduler.on_trial_add(None, trials[key])
        result = {"epoch": t, "v": value}
        if kind == "complete":
            scheduler.on_trial_complete(None, trials[key], result)
            stopped.add(key)
            continue
        decision = scheduler.on_trial_result(None, trials[key], result)
        out.append((key, t, decision))
        if decision == STOP:
            scheduler.on_trial_complete(None, trials[key], result)  # as Tune then calls it
            stopped.add(key)
    return out


def ray_asha(spec):
    s = spec.scheduler
    return ASHAScheduler(time_attr="epoch", metric="v", mode=spec.objective.mode, max_t=s.max_t,
                         grace_period=s.grace_period, reduction_factor=s.reduction_factor)


def both(spec, events):
    ours = decisions(SweepASHA(spec, SweepRecord.in_memory(spec)), events)
    theirs = decisions(ray_asha(spec), events, add=True)
    return ours, theirs


# --- a table by hand ----------------------------------------------------------------------

# rf 3, rungs at 1 and 3, max_t 9; values for mode min (max negates them).
TABLE = [
    ("a", 1, 0.50, GO),    # the first at rung 1 always continues
    ("b", 1, 0.90, STOP),  # worse than the 2/3 quantile of {0.50}
    ("c", 1, 0.10, GO),    # better than the quantile of {0.50, 0.90}
    ("a", 2, 0.45, GO),    # between rungs: not judged
    ("d", 1.5, 0.70, STOP),  # first report past rung 1, judged there: 0.70 > quantile
    ("a", 3, 0.40, GO),    # the first at rung 3
    ("c", 3.5, 0.42, STOP),  # judged at rung 3 against {0.40}
    ("e", 3.2, 0.05, GO),  # jumped over rung 1: judged at rung 3 only, and better
    ("a", 9, 0.30, STOP),  # max_t: done
]


@pytest.mark.parametrize("mode", ["min", "max"])
def test_asha_stops_the_trials_the_table_says_for_min_and_max(mode):
    sign = 1 if mode == "min" else -1
    spec = spec_for(mode)
    events = [(k, t, sign * v, "result") for k, t, v, _ in TABLE]
    ours, theirs = both(spec, events)
    assert [d for *_, d in ours] == [d for *_, d in TABLE]
    assert ours == theirs


# Ties with the cut-off: a score equal to it continues (Ray stops only below it). Values
# for mode min; max negates them, so the scores, and the decisions, are the same.
TIES = {
    "rf 3, equal to the only record": (3, 9, [
        ("a", 1, 0.5, GO),    # the first at rung 1
        ("b", 1, 0.5, GO),    # cut-off: the quantile of {0.5} is 0.5; equal: continues
        ("c", 1, 0.5, GO),    # the quantile of {0.5, 0.5} is 0.5 again
        ("d", 1, 0.6, STOP),  # worse than 0.5
        ("a", 3, 0.4, GO),    # the first at rung 3
        ("b", 3, 0.4, GO),    # equal to the only record there
        ("c", 4, 0.41, STOP),  # judged at rung 3: worse than the quantile of {0.4, 0.4}
    ]),
    "rf 2, equal to the interpolated median": (2, 16, [
        ("a", 1, 0.1, GO),
        ("b", 1, 0.3, STOP),  # worse than 0.1
        ("c", 1, 0.5, STOP),  # the median of {0.1, 0.3} is 0.2
        ("d", 1, 0.3, GO),    # the median of {0.1, 0.3, 0.5} is 0.3: equal, continues
        ("e", 1, 0.3, GO),    # {0.1, 0.3, 0.3, 0.5}: half-way between 0.3 and 0.3
        ("f", 1, 0.31, STOP),  # {0.1, 0.3, 0.3, 0.3, 0.5}: 0.3
    ]),
}


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("case", TIES)
def test_a_score_equal_to_the_cutoff_continues_as_in_rays_asha(case, mode):
    rf, max_t, table = TIES[case]
    sign = 1 if mode == "min" else -1
    spec = spec_for(mode, max_t=max_t, rf=rf)
    events = [(k, t, sign * v, "result") for k, t, v, _ in table]
    ours, theirs = both(spec, events)
    assert [d for *_, d in ours] == [d for *_, d in table]
    assert ours == theirs


def test_the_first_trial_at_each_rung_continues_and_the_cutoff_is_the_interpolated_quantile():
    rungs = Rungs(milestones=(1, 3), reduction_factor=3, mode="min")
    assert not rungs.judge("a", 1, 0.5)
    assert rungs.cutoff(1) == -0.5
    assert not rungs.judge("b", 1, 0.2)
    # scores -0.5 and -0.2: the 2/3 quantile lies two thirds of the way from -0.5 to -0.2
    assert rungs.cutoff(1) == pytest.approx(-0.3)
    assert rungs.judge("c", 1, 0.31)  # score -0.31 < -0.3: stopped, and recorded
    # scores -0.5, -0.31, -0.2: the quantile is a third of the way from -0.31 to -0.2
    assert rungs.cutoff(1) == pytest.approx(-0.31 + 0.11 / 3)
    assert not rungs.judge("d", 1, 0.27)


def test_a_trial_is_judged_once_per_rung_even_when_it_reports_again():
    rungs = Rungs(milestones=(1, 3), reduction_factor=3, mode="min")
    assert not rungs.judge("a", 1, 0.2)
    assert not rungs.judge("b", 1, 0.1)
    assert not rungs.judge("b", 1.5, 99.0)  # already judged at rung 1: no second verdict
    assert rungs.recorded[1] == {"a": -0.2, "b": -0.1}


def test_milestones_are_the_rungs_below_max_t():
    assert milestones_of(grace_period=1, max_t=9, reduction_factor=3) == (1, 3)
    assert milestones_of(grace_period=1, max_t=10, reduction_factor=3) == (1, 3, 9)
    assert milestones_of(grace_period=100, max_t=900, reduction_factor=3) == (100, 300)
    assert spec_for("min", max_t=27, rf=3).scheduler.rungs() == (1, 3, 9)


# --- random sequences, several arrival orders ---------------------------------------------


def random_events(seed, *, trials=14, max_t=9):
    """Every trial's reports at increasing times (some skip rungs, some come at fractions
    of an epoch), distinct values, a few trials ending early by themselves, interleaved in
    a random arrival order."""
    rng = random.Random(seed)
    values = rng.sample(range(1, 100_000), trials * 40)
    per_trial = []
    for i in range(trials):
        t, reports = 0.0, []
        while t < max_t:
            t = round(t + rng.choice([0.5, 1, 1, 1, 2, 2.5, 3]), 1)
            reports.append((f"t{i}", min(t, max_t), values.pop() / 1000, "result"))
        if rng.random() < 0.2:  # returned on its own before max_t
            cut = rng.randrange(1, len(reports))
            reports = reports[:cut] + [(*reports[cut - 1][:3], "complete")]
        per_trial.append(reports)
    events = []
    while any(per_trial):
        lane = rng.choice([r for r in per_trial if r])
        events.append(lane.pop(0))
    return events


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("seed", range(12))
def test_asha_decides_every_report_as_rays_asha_does(mode, seed):
    spec = spec_for(mode)
    ours, theirs = both(spec, random_events(seed))
    assert ours == theirs
    assert any(d == STOP and t < 9 for _, t, d in ours), "the sequence never tests a stop"


@pytest.mark.parametrize("grace, rf, max_t", [(1, 2, 16), (2, 3, 20), (1, 4, 30)])
def test_other_rung_shapes_decide_as_rays_asha(grace, rf, max_t):
    spec = spec_for("min", max_t=max_t, grace=grace, rf=rf)
    for seed in range(4):
        ours, theirs = both(spec, random_events(100 + seed, max_t=max_t))
        assert ours == theirs


def test_stops_before_max_t_are_marked_in_the_records_and_reaching_max_t_is_not():
    spec = spec_for("min")
    record = SweepRecord.in_memory(spec)
    for key in "abc":
        record.start(key, {"lr": 0.01})
    asha = SweepASHA(spec, record)
    records = record.rows
    decisions(asha, [("a", 1, 0.1, "result"), ("b", 1, 0.9, "result"),
                     ("a", 9, 0.05, "result"), ("c", 1, 0.05, "result")])
    assert [bool(records.trials[k].get("stopped_early")) for k in "abc"] == [False, True, False]


# --- a resumed sweep's rungs --------------------------------------------------------------


def interrupted_halfway(spec, events):
    """``events`` decided by one scheduler from start to end (``expected``), and by a
    ``first`` one over their first ``half`` (its decisions ``before``), with the reports
    left for a resumed scheduler (``rest``: those of trials the first one did not stop)."""
    half = len(events) // 2
    expected = decisions(SweepASHA(spec, SweepRecord.in_memory(spec)), events)
    first = SweepASHA(spec, SweepRecord.in_memory(spec))
    before = decisions(first, events[:half])
    stopped = {key for key, _, d in before if d == STOP}
    return expected, first, half, before, [e for e in events[half:] if e[0] not in stopped]


def test_rungs_seeded_from_the_study_decide_as_if_the_sweep_had_never_stopped():
    """The first half of the reports, then the driver dies. Its trials come back under new
    Tune ids; the rungs rebuilt from the study's intermediate values (the first report at
    or past each rung is stored at the rung) decide the second half as the uninterrupted
    scheduler does, and empty rungs would not."""
    spec = spec_for("min")
    events = [e for e in random_events(7) if e[3] == "result"]
    expected, first, _, before, rest = interrupted_halfway(spec, events)
    # what the study holds: each trial's value at each rung it was judged at (min: -score)
    study = [RecordedTrial(trial_id=key, number=i, state=None, status=None, params={},
                           intermediate={int(m): -first.rungs.recorded[m][key]
                                         for m in first.rungs.milestones
                                         if key in first.rungs.recorded[m]})
             for i, key in enumerate(sorted({e[0] for e in events}))]
    seeded = SweepASHA(spec, SweepRecord.in_memory(spec),
                       seeded=rung_values(study, spec.scheduler.rungs()))
    after = decisions(seeded, rest)
    assert after == expected[len(before):]
    assert decisions(SweepASHA(spec, SweepRecord.in_memory(spec)), rest) != after
