"""PASHA (``scheduler.progressive: true``): ASHA whose end starts at the second rung and
grows a rung at a time while the top two rungs rank trials differently by more than the
noise the trials' own curves show.

The rule is driven with hand-made curves through :class:`ProgressiveRungs` and the
sweep's own ``SweepASHA`` (no Ray cluster: the scheduler is a plain object), for min and
max; a resume is checked against the sweep that never stopped.
"""

from __future__ import annotations

import pytest

from hpsearch.driver.record.study import RecordedTrial
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.pasha import ProgressiveRungs
from hpsearch.driver.search.schedulers import SweepASHA, make_scheduler
from hpsearch.errors import SpaceError
from hpsearch.space import parse_space
from .test_rungs import decisions, random_events


def spec_for(mode, *, max_t=27, grace=1, rf=3, **scheduler):
    return parse_space({
        "name": "p", "trainable": "digits", "objective": {"metric": "v", "mode": mode},
        "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
        "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": max_t,
                      "grace_period": grace, "reduction_factor": rf, "progressive": True,
                      **scheduler},
    })


def run(rungs, curves, sign=1):
    """Feed each trial's curve (``{key: [value at t=1, 2, ...]}``, trial after trial) to
    ``rungs``; returns ``{key: the t it stopped at, or None}``."""
    out = {}
    for key, values in curves.items():
        out[key] = None
        for t, value in enumerate(values, 1):
            if rungs.judge(key, t, sign * value):
                out[key] = t
                break
    return out


def rungs_for(mode="min"):
    return ProgressiveRungs(milestones=(1, 3, 9), max_t=27, reduction_factor=3, mode=mode)


# Losses at epochs 1-3 of trials that reach rung 3 (each is best so far at rung 1, so ASHA
# keeps it there). Parallel curves: the order at rung 1 is the order at rung 3.
PARALLEL = {f"t{i}": [1.0 - 0.1 * i, 0.9 - 0.1 * i, 0.8 - 0.1 * i] for i in range(6)}


@pytest.mark.parametrize("mode", ["min", "max"])
def test_while_the_top_two_rungs_agree_every_trial_ends_at_the_second_rung(mode):
    rungs = rungs_for(mode)
    stopped = run(rungs, PARALLEL, sign=1 if mode == "min" else -1)
    assert stopped == {k: 3 for k in PARALLEL} and rungs.end == 3


@pytest.mark.parametrize("mode", ["min", "max"])
def test_a_trial_that_overtakes_by_more_than_the_noise_opens_the_next_rung_and_goes_on(mode):
    sign = 1 if mode == "min" else -1
    rungs = rungs_for(mode)
    run(rungs, PARALLEL, sign)
    # Behind t5 at rung 1 (0.55 against 0.5; ASHA keeps it), far ahead of all at rung 3,
    # and no crossing before: the rankings disagree by more than the noise (0).
    assert run(rungs, {"late": [0.55, 0.45, 0.05]}, sign) == {"late": None}
    assert rungs.end == 9 and rungs.epsilon() == 0
    # the next trial to reach 3 is judged by ASHA there, and ends at 9 at the latest
    assert run(rungs, {"n": [0.45, 0.2, 0.01, *[0.01] * 6]}, sign) == {"n": 9}


def test_trials_that_trade_places_within_the_noise_open_nothing():
    """Curves that cross each other by 0.2 between epochs 1 and 2 make 0.2 the noise; a
    change of places at rung 3 by 0.05 is within it."""
    rungs = rungs_for()
    wobbly = {
        "a": [0.50, 0.70, 0.40],
        "b": [0.45, 0.90, 0.42],  # ahead of a at 1, behind by 0.2 at 2, by 0.02 at 3
        "c": [0.40, 0.95, 0.44],
    }
    assert run(rungs, wobbly) == {"a": 3, "b": 3, "c": 3}
    assert rungs.epsilon() >= 0.2 and rungs.end == 3


def test_the_end_grows_no_further_than_max_t():
    rungs = ProgressiveRungs(milestones=(1, 3), max_t=9, reduction_factor=3, mode="min")
    assert run(rungs, {"a": [0.5, 0.5, 0.5], "b": [0.4, 0.4, 0.4]}) == {"a": 3, "b": 3}
    assert rungs.end == 3  # b ahead of a at both rungs: they agree
    run(rungs, {"c": [0.39, 0.39, 0.6]})  # ahead of both at rung 1, behind both at 3
    assert rungs.end == 9 == rungs.levels[-1]
    assert not rungs.judge("e", 3, 0.05)  # from here it is ASHA; SweepASHA ends at max_t


def test_with_one_rung_below_max_t_it_decides_as_asha():
    one = spec_for("min", max_t=6, grace=2)
    assert one.scheduler.rungs() == (2,)
    events = random_events(5, trials=20, max_t=6)
    plain = parse_space({**one.raw, "scheduler": {**one.raw["scheduler"], "progressive": False}})
    assert decisions(SweepASHA(one, SweepRecord.in_memory(one)), events) == \
        decisions(SweepASHA(plain, SweepRecord.in_memory(plain)), events)


def _curves_as_study(rungs_or_events):
    """What a resumed sweep's study holds: every report of each trial (``{key: {t: v}}``)
    as its intermediate values."""
    return [RecordedTrial(trial_id=key, number=i, state=None, status=None, params={},
                          intermediate=dict(curve))
            for i, (key, curve) in enumerate(rungs_or_events.items())]


@pytest.mark.parametrize("cut", [6, 7, 8])
def test_a_resumed_sweep_reopens_the_rungs_it_had_opened_and_decides_the_rest_alike(cut):
    """Cut after the parallel trials (end 3), after ``late`` opened 9, or after ``w``,
    whose wild curve crosses every other by ~1 before rung 3 and so makes the noise
    swallow ``late``'s change of places: a resume reopens 9 because trials reported past
    3, not because the rungs disagree on what the study holds."""
    spec = spec_for("min")
    curves = {**PARALLEL, "late": [0.55, 0.45, 0.05, 0.04], "w": [0.42, 1.5, 0.1, 0.09],
              "n": [0.45, 0.2, 0.01]}
    events = [(k, t, v, "result") for k, vs in curves.items() for t, v in enumerate(vs, 1)]
    whole = decisions(SweepASHA(spec, SweepRecord.in_memory(spec)), events)
    keys = list(curves)[:cut]
    before = [e for e in events if e[0] in keys]
    first = SweepASHA(spec, SweepRecord.in_memory(spec))
    head = decisions(first, before)
    record = SweepRecord.in_memory(spec)
    record.recorded = _curves_as_study(
        {k: {t: v for kk, t, v, _ in before if kk == k} for k in keys})
    resumed = make_scheduler(spec, record)
    assert resumed.rungs.end == first.rungs.end
    rest = [e for e in events if e[0] not in keys]
    assert decisions(resumed, rest) == whole[len(head):]
    assert first.rungs.end == (3 if cut == 6 else 9)


def test_validation_says_what_progressive_cannot_be_combined_with():
    from hpsearch.space import summarize

    spec = spec_for("min")
    assert spec.scheduler.progressive and spec.scheduler.brackets == 1  # no default of 2
    assert "PASHA: up to 27 epochs" in summarize(spec)
    assert "trials end at 3 epochs at first" in summarize(spec)
    assert "ends trials where ASHA would" in summarize(spec_for("min", max_t=6, grace=2))
    for scheduler, says in (({"brackets": 2}, "PASHA is one bracket .* brackets 2"),
                            ({"type": "fifo"}, "set type: asha .*got type fifo"),
                            ({"progressive": "yes"}, "expected true or false")):
        with pytest.raises(SpaceError, match=says):
            spec_for("min", **scheduler)
    with pytest.raises(SpaceError, match="MO-ASHA, one bracket: PASHA ranks one objective"):
        parse_space({**spec.raw, "objective": [{"metric": "v", "mode": "min"},
                                               {"metric": "w", "mode": "max"}]})
