"""The one start rule: plan, share and deadline (no Ray; the ledger is a stand-in)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hpsearch.driver.limits.admission import DONE, START, WAIT, Admission, MilestoneTimes
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


# --- how long a trial takes to its first rung ----------------------------------------------


@pytest.mark.parametrize("time_attr, max_t, grace, history, median", [
    # epochs: a log_every row is never a rung; b's rung is its report at epoch 2
    ("epoch", 9, 1, [row("a", 4.0, epoch=0.5, evaluated=False), row("a", 9.0, epoch=1),
                     row("a", 20.0, epoch=2), row("b", 30.0, epoch=1.4, evaluated=False),
                     row("b", 31.0, epoch=2), row("c", 5.0, epoch=0.5)], 20.0),
    # seconds: the rung at 10 s, read from the seconds column
    ("time", 90, 10, [row("a", 12.0, epoch=1), row("b", 8.0, epoch=1), row("b", 16.0, epoch=2),
                      row("c", 11.0, epoch=1)], 12.0),
])
def test_the_median_time_to_the_first_rung_reads_only_new_reports_each_time(
        time_attr, max_t, grace, history, median):
    times = MilestoneTimes(spec(time_attr=time_attr, max_t=max_t, grace_period=grace,
                                reduction_factor=3))
    records = SimpleNamespace(history=[], rewrites=0)
    for r in history:  # reports arrive one by one
        records.history.append(r)
        times.median(records)
    assert times.median(records) == pytest.approx(median)
    assert times.rows_read == len(history)
    records.rewrites = 1  # a resume rewrote the records: read again from the start
    assert times.median(records) == pytest.approx(median)
    assert times.rows_read == 2 * len(history)


# --- start, wait, done -----------------------------------------------------------------------


class Ledger:
    """The cluster ledger as one sweep sees it: its share is what it wants, up to what the
    others leave it (``capacity``)."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.share = capacity
        self.wants = []

    def update(self, running, *, want=None, force=False, fresh=False):
        self.wants.append(want)
        self.share = min(want, self.capacity)
        return self.share

    def confirmed(self, running, *, want=None):
        """The share now, waited for (the real client's answer within 0.25 s)."""
        return self.update(running, want=want if want is not None else self.wants[-1],
                           force=True)

    def close(self):
        self.closed = True


def test_start_until_the_slots_are_busy_and_done_once_nothing_is_left_to_start():
    admission = Admission(planned=3, slots=2)
    assert admission.decide(active=0, to_start=3) == START
    assert admission.decide(active=1, to_start=2) == START
    assert admission.decide(active=2, to_start=1) == WAIT
    assert admission.decide(active=2, to_start=0) == DONE
    assert admission.decide(active=0, to_start=0) == DONE


def test_the_share_of_a_shared_cluster_caps_the_trials_at_once():
    ledger = Ledger(capacity=1)
    admission = Admission(planned=8, slots=2, ledger=ledger)
    assert ledger.wants == [2]  # registered at once with what it could run
    assert admission.decide(active=0, to_start=8) == START
    assert admission.decide(active=1, to_start=7) == WAIT
    ledger.capacity = 2
    assert admission.decide(active=1, to_start=7) == START


class LaggingLedger(Ledger):
    """The real client's timing on a busy machine: an answer comes a round trip after its
    report, so calls in quick succession return the share known before, unless one waits
    for its answer (``force``)."""

    known = None

    def update(self, running, *, want=None, force=False, fresh=False):
        super().update(running, want=want)
        if force or self.known is None:
            self.known = self.share
        return self.known


def test_a_start_waits_for_the_share_as_it_is_now_not_the_last_answer():
    """Two sweeps started together: the first registers alone (the whole cluster), the
    second registers before the first's trials start. Each start must see the share that
    the ledger gives now; a wait may go on the share the sweep knew."""
    ledger = LaggingLedger(capacity=4)
    admission = Admission(planned=4, slots=4, ledger=ledger)
    ledger.capacity = 2  # the other sweep registers
    verdicts = [admission.decide(active=n, to_start=4 - n) for n in range(4)]
    assert verdicts == [START, START, WAIT, WAIT]


def test_a_sweep_never_wants_fewer_slots_than_it_runs_and_none_past_its_plan():
    admission = Admission(planned=2, slots=4)
    assert admission.want(active=3, to_start=0) == 3  # a running trial waits for its slot
    assert admission.want(active=1, to_start=1) == 2
    assert admission.want(active=0, to_start=9) == 4


def test_held_back_only_when_the_share_keeps_the_sweep_below_its_own_slots():
    """Then an idle trial actor must not hold a slot (the searcher finishes the search for
    now). A sweep alone whose slots are all busy is not held back by anybody: it keeps
    its cached actor and the next trial reuses it."""
    alone = Admission(planned=8, slots=2, ledger=Ledger(capacity=2))
    assert not alone.held_back(active=2, to_start=6)
    squeezed = Admission(planned=8, slots=2, ledger=Ledger(capacity=1))
    assert squeezed.held_back(active=1, to_start=7)
    assert not squeezed.held_back(active=0, to_start=7)  # below its share: it may start
    assert not squeezed.held_back(active=1, to_start=0)  # nothing left: the search ends
    assert not Admission(planned=8, slots=2).held_back(active=2, to_start=6)  # no ledger


def test_no_trial_starts_that_could_not_reach_its_first_rung_before_the_deadline():
    now = [1000.0]
    median = [None]
    admission = Admission(planned=8, slots=2, deadline_at=1100.0,
                          first_milestone_s=lambda: median[0], clock=lambda: now[0])
    assert admission.decide(active=0, to_start=8) == START  # no trial timed yet
    median[0] = 60.0
    assert admission.decide(active=0, to_start=8) == START  # 100 s left, 60 needed
    now[0] = 1050.0
    assert admission.decide(active=0, to_start=8) == DONE  # 50 s left
    assert admission.refused_for_deadline


def test_closing_gives_the_share_back():
    ledger = Ledger(capacity=2)
    Admission(planned=2, slots=2, ledger=ledger).close()
    assert ledger.closed
