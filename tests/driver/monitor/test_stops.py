"""The sweep's one stopper: the first reason that holds ends the run and is kept."""

from hpsearch.driver.monitor.stops import SweepStopper
from hpsearch.space.spec import FloatParam, Objective, Scheduler, Spec
from hpsearch.store.records import TrialRecords

SPEC = Spec(name="t", trainable="digits", objective=Objective("val_loss", "min"),
            params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
            scheduler=Scheduler(type="fifo", max_t=2))


class Watch:
    stalled = False

    def should_stop(self):
        return self.stalled


def ended(records, tid, *, failed):
    records.start(tid, {"lr": 0.01})
    if not failed:
        records.result(tid, {"epoch": 2, "val_loss": 0.5, "time_total_s": 1.0})
    records.end(tid, errored=failed, returned=not failed)


def test_nothing_stops_a_healthy_sweep_before_its_time():
    now = [0.0]
    stopper = SweepStopper(TrialRecords(SPEC), all_failed_after=3, watch=Watch(),
                           time_budget_s=60, deadline_at=100.0, clock=lambda: now[0])
    now[0] = 59.0
    assert not stopper.stop_all() and stopper.reason is None
    assert stopper("t", {}) is False  # never stops one trial


def test_the_time_budget_counts_from_this_runs_start_and_the_deadline_is_a_moment():
    now = [1000.0]
    budget = SweepStopper(TrialRecords(SPEC), all_failed_after=3, time_budget_s=60,
                          clock=lambda: now[0])
    now[0] = 1060.0
    assert budget.stop_all() and budget.reason == "time_budget"
    deadline = SweepStopper(TrialRecords(SPEC), all_failed_after=3, time_budget_s=3600,
                            deadline_at=1100.0, clock=lambda: now[0])
    now[0] = 1100.0
    assert deadline.stop_all() and deadline.reason == "deadline"


def test_the_first_trials_all_failing_stops_the_sweep_but_one_success_keeps_it_going():
    records = TrialRecords(SPEC)
    stopper = SweepStopper(records, all_failed_after=3)
    ended(records, "a", failed=True)
    ended(records, "b", failed=True)
    assert not stopper.stop_all()
    ended(records, "c", failed=True)
    assert stopper.stop_all() and stopper.reason == "all_failed"
    mixed = TrialRecords(SPEC)
    other = SweepStopper(mixed, all_failed_after=3)
    for tid, failed in (("a", True), ("b", False), ("c", True), ("d", True)):
        ended(mixed, tid, failed=failed)
    assert not other.stop_all()


def test_ctrl_c_and_a_stall_are_reasons_too_and_the_first_reason_is_kept():
    watch = Watch()
    stopper = SweepStopper(TrialRecords(SPEC), all_failed_after=3, watch=watch)
    watch.stalled = True
    assert stopper.stop_all() and stopper.reason == "stalled"
    stopper.interrupt()
    assert stopper.reason == "stalled"
    pressed = SweepStopper(TrialRecords(SPEC), all_failed_after=3)
    pressed.interrupt()
    assert pressed.stop_all() and pressed.reason == "interrupted"
