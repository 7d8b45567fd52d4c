"""The start limits' deadline estimate: when each trial reached its first rung (no Ray)."""

from __future__ import annotations

import pytest

from hpsearch.driver.budget import first_milestone_seconds
from hpsearch.space import parse_space

SPACE = {
    "name": "t", "trainable": "digits", "objective": {"metric": "val_loss", "mode": "min"},
    "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
    "trials": {"num": 8},
}


def spec(**scheduler):
    params = {**SPACE["params"], "epochs": 20} if scheduler["time_attr"] == "time" else SPACE["params"]
    return parse_space({**SPACE, "params": params, "scheduler": {"type": "asha", **scheduler}})


def row(tid, t_total, evaluated=True, **values):
    return {"trial_id": tid, "time_total_s": t_total, "evaluated": evaluated, **values}


def test_epoch_rungs_take_the_median_time_to_the_first_rung_from_reports_only():
    s = spec(time_attr="epoch", max_t=9, grace_period=1, reduction_factor=3)
    history = [
        row("a", 4.0, epoch=0.5, evaluated=False),  # a log_every row: never a rung
        row("a", 9.0, epoch=1), row("a", 20.0, epoch=2),
        row("b", 30.0, epoch=1.4, evaluated=False),  # logged past the rung, before its report
        row("b", 31.0, epoch=2),
        row("c", 5.0, epoch=0.5),
    ]
    assert first_milestone_seconds(history, s) == pytest.approx((9.0 + 31.0) / 2)


def test_time_rungs_read_the_seconds_column():
    s = spec(time_attr="time", max_t=90, grace_period=10, reduction_factor=3)
    history = [row("a", 12.0, epoch=1), row("b", 8.0, epoch=1), row("b", 16.0, epoch=2),
               row("c", 11.0, epoch=1)]
    assert first_milestone_seconds(history, s) == pytest.approx(np_median([12.0, 16.0, 11.0]))


def np_median(values):
    values = sorted(values)
    return values[len(values) // 2]


@pytest.mark.parametrize("time_attr, max_t, grace", [("epoch", 9, 1), ("time", 90, 10)])
def test_the_running_median_agrees_with_the_whole_history(time_attr, max_t, grace):
    from types import SimpleNamespace

    from hpsearch.driver.budget import MilestoneTimes

    s = spec(time_attr=time_attr, max_t=max_t, grace_period=grace, reduction_factor=3)
    history = [row("a", 4.0, epoch=0.5, evaluated=False), row("a", 12.0, epoch=1),
               row("b", 8.0, epoch=1), row("b", 30.0, epoch=1.5, evaluated=False),
               row("b", 31.0, epoch=2), row("c", 11.0, epoch=1)]
    records = SimpleNamespace(history=[], rewrites=0)
    times = MilestoneTimes(s)
    for r in history:  # reports arrive one by one; each check reads only the new ones
        records.history.append(r)
        assert times.median(records) == first_milestone_seconds(records.history, s)
    assert times.rows_read == len(history)


class _Ledger:
    """The cluster ledger as one sweep sees it: its share is what it wants, up to what the
    others leave it (``capacity``)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.share = capacity

    def update(self, running, *, want=None, force=False, fresh=False):
        self.share = min(want, self.capacity)
        return self.share


def test_only_a_sweep_held_below_its_slots_waits_for_its_share():
    """A sweep waiting for its share gives Tune's cached actors back (the scheduler then
    stops them). A sweep alone whose slots are all busy is not waiting for anybody: it
    must keep its cached actors, or each next trial starts a new actor process (seen as
    887 releases in a lone 300-trial sweep). Once every trial has started, an idle cached
    actor would only hold resources, and goes back."""
    from hpsearch.driver import live
    from hpsearch.driver.budget import StartLimits
    from hpsearch.store.records import TrialRecords

    space = parse_space(SPACE)  # 8 trials
    try:
        alone = StartLimits(TrialRecords(space), space, slots=2, ledger=_Ledger(capacity=2))
        live.note_tune_trials(None, {"a", "b"}, active=2)
        assert alone.may_start() is None  # both slots busy: not now
        assert not alone.waiting_for_share
        alone.heartbeat()
        assert not alone.waiting_for_share

        squeezed = StartLimits(TrialRecords(space), space, slots=2, ledger=_Ledger(capacity=1))
        live.note_tune_trials(None, {"a"}, active=1)
        assert squeezed.may_start() is None  # another sweep holds the second slot
        assert squeezed.waiting_for_share
        squeezed.heartbeat()
        assert squeezed.waiting_for_share
        live.note_tune_trials(None, {"a"}, active=0)
        assert squeezed.may_start() is True and not squeezed.waiting_for_share

        # Every trial started: an idle cached actor would only hold resources.
        live.note_tune_trials(None, {f"t{i}" for i in range(8)}, active=2)
        alone.heartbeat()
        assert alone.waiting_for_share
    finally:
        live.clear()


def test_trials_admitted_within_one_step_count_as_planned():
    """Tune asks for up to ``max_concurrent_trials`` trials within one step. One trial of
    two planned has ended and the share just grew to 2 (the other sweep ended): the second
    is admitted, and a third must not be, before Tune lists either (seen in CI as a sweep
    of 2 planned trials running 3, the third waiting for a worker group for good)."""
    from hpsearch.driver import live
    from hpsearch.driver.budget import StartLimits
    from hpsearch.store.records import TrialRecords

    space = parse_space({**SPACE, "trials": {"num": 2}})
    records = TrialRecords(space)
    try:
        limits = StartLimits(records, space, slots=2, ledger=_Ledger(capacity=2))
        records.start("a", {"lr": 0.01})
        records.end("a", returned=True)
        live.note_tune_trials(None, {"a"}, active=0)
        limits.note_tune(outside=set())
        assert limits.known() == 1
        assert limits.may_start("b") is True
        assert limits.known() == 2
        assert limits.may_start("c") is False  # the plan is full: the search ends

        # Tune lists b (no row yet), then starts it: b is counted once all along.
        limits.note_tune(outside={"b"})
        assert limits.known() == 2
        records.start("b", {"lr": 0.02})
        assert limits.known() == 2
    finally:
        live.clear()


def test_an_admitted_trial_that_starts_within_the_step_is_counted_once():
    """Tune may start a trial in the same step that admitted it: its row and its admission
    are one trial, so the sweep still starts the rest of its plan."""
    from hpsearch.driver import live
    from hpsearch.driver.budget import StartLimits
    from hpsearch.store.records import TrialRecords

    space = parse_space({**SPACE, "trials": {"num": 3}})
    records = TrialRecords(space)
    try:
        limits = StartLimits(records, space, slots=3, ledger=_Ledger(capacity=3))
        live.note_tune_trials(None, set(), active=0)
        limits.note_tune(outside=set())
        assert limits.may_start("a") is True
        records.start("a", {"lr": 0.01})
        assert limits.known() == 1
        assert limits.may_start("b") is True
        assert limits.may_start("c") is True
        assert limits.may_start("d") is False
    finally:
        live.clear()


def test_a_sweep_wants_a_slot_for_every_trial_tune_holds_even_past_its_plan():
    """Whatever the count of known trials, each trial Tune holds and has not ended needs
    a slot of the share: asking for fewer left a warm trial waiting for its worker group
    for good (the ledger gives at most what a sweep wants)."""
    from hpsearch.driver import live
    from hpsearch.driver.budget import StartLimits
    from hpsearch.store.records import TrialRecords

    space = parse_space({**SPACE, "trials": {"num": 2}})
    records = TrialRecords(space)
    try:
        limits = StartLimits(records, space, slots=2, ledger=_Ledger(capacity=2))
        for tid in "abc":  # one more than planned, as an older hpsearch could start
            records.start(tid, {"lr": 0.01})
        records.end("a", returned=True)
        records.end("b", returned=True)
        live.note_tune_trials(None, {"a", "b", "c"}, active=1)
        limits.note_tune(outside=set())
        assert limits.want() == 1
        assert limits.share() == 1
        assert limits.may_start("d") is False
    finally:
        live.clear()
