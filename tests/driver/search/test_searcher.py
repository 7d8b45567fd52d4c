"""The searcher tells the study what happened to each trial, admits no trial beyond the
plan, and a resumed sweep's searcher continues its unfinished trials as the same Optuna
trials. Each test plays Tune's part (suggest, on_trial_result, the scheduler's verdict,
on_trial_complete) with the real searcher, study journal, admission, ASHA and records,
and reads the study back from its journal file. Nothing here starts Ray."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.trial import TrialState
from ray.tune.search import Searcher

from hpsearch.driver.limits.admission import Admission
from hpsearch.driver.search.ids import TRIAL_ID_KEY
from hpsearch.driver.search.schedulers import SweepASHA
from hpsearch.driver.search.searcher import SweepSearcher
from hpsearch.driver.record.study import load_sweep_study
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.space import parse_space
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import write_tables
from hpsearch.store.reports import OBJECTIVE_MISSING

optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_spec(mode="min", *, max_t=9, time_attr="epoch", num=8):
    params = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}, "batch_size": 16}
    if time_attr == "time":
        params["epochs"] = 20
    return parse_space({
        "name": "s", "trainable": "digits", "objective": {"metric": "val_loss", "mode": mode},
        "params": params, "search": {"algorithm": "tpe", "seed": 3, "n_startup_trials": 2},
        "scheduler": {"type": "asha", "time_attr": time_attr, "max_t": max_t,
                      "grace_period": 1 if time_attr != "time" else 10, "reduction_factor": 3,
                      "brackets": 1},
        "trials": {"num": num},
    })


class Tune:
    """Tune's calls into a searcher and scheduler, for one run of a sweep."""

    def __init__(self, spec, sweep, *, slots=2):
        self.spec = spec
        # A sweep with tables resumes: its record read back from disk and reconciled.
        self.record = SweepRecord.open(spec, sweep, {}) if sweep.trials.exists() \
            else SweepRecord(spec, sweep)
        self.records = self.record.rows
        self.study = self.record.open_study(directions=[
            "minimize" if spec.objective.mode == "min" else "maximize"])
        self.journal = self.record.journal
        self.admission = Admission(planned=spec.trials.num, slots=slots)
        self.searcher = SweepSearcher(self.record, admission=self.admission)
        self.asha = SweepASHA(spec, self.record)
        self.configs = {}

    def start(self, tune_id):
        config = self.searcher.suggest(tune_id)
        if isinstance(config, dict):
            self.configs[tune_id] = config
            self.record.start(config[TRIAL_ID_KEY], config)
        return config

    def report(self, tune_id, result):
        trial = type("T", (), {"trial_id": tune_id, "config": self.configs[tune_id]})()
        # Tune's order: the scheduler decides, the searcher hears a report it did not stop,
        # the callbacks (the tables callback: the record) hear every report; then a
        # stopped trial ends.
        decision = self.asha.on_trial_result(None, trial, result)
        if decision != "STOP":
            self.searcher.on_trial_result(tune_id, result)
        self.record.report(trial.config[TRIAL_ID_KEY], result)
        if decision == "STOP":
            self.searcher.on_trial_complete(tune_id, result)
        return decision

    def end(self, tune_id, result=None, *, error=False):
        """A trial's end: Tune hands its last ``result`` (the trial's last report, which
        the callbacks heard already) to the searcher."""
        self.searcher.on_trial_complete(tune_id, result, error=error)


def report(epoch, value, **extra):
    return {"epoch": epoch, "val_loss": value, "training_iteration": int(epoch * 2),
            "time_total_s": epoch, "status": "running", **extra}


@pytest.fixture
def sweep(tmp_path):
    s = SweepDir.of(tmp_path / "s")
    s.path.mkdir()
    return s


def study_of(sweep):
    return {t.user_attrs["trial_id"]: t for t in load_sweep_study(sweep).trials}


@pytest.mark.parametrize("mode", ["min", "max"])
def test_asha_stop_is_pruned_completion_is_complete_failure_fails(sweep, mode):
    spec = make_spec(mode)
    tune = Tune(spec, sweep, slots=3)
    sign = 1 if mode == "min" else -1
    for tid in ("a", "b", "c"):
        tune.start(tid)
    # a: to max_t, one report per epoch; ASHA says STOP at max_t (Tune then hands the
    # last report to the callbacks, not the searcher, before it ends the trial).
    for e in range(1, 9):
        assert tune.report("a", report(e, sign * (1.0 / e))) == "CONTINUE"
    assert tune.report("a", report(9, sign * 0.1, status="completed")) == "STOP"
    # b: two reports per epoch, worse than a at rung 1: stopped there
    assert tune.report("b", report(0.5, sign * 2.0)) == "CONTINUE"
    assert tune.report("b", report(1.0, sign * 1.9)) == "STOP"
    # c: its code raised after one report
    tune.report("c", report(1, sign * 0.5))
    tune.end("c", error=True)

    study = study_of(sweep)
    a, b, c = study["a"], study["b"], study["c"]
    assert a.state == TrialState.COMPLETE and a.value == pytest.approx(sign * 0.1)
    assert sorted(a.intermediate_values) == list(range(1, 10))  # the last one included
    assert b.state == TrialState.PRUNED
    assert b.intermediate_values == pytest.approx({0: sign * 2.0, 1: sign * 1.9})
    assert b.value == pytest.approx(sign * 1.9)  # Optuna: the last intermediate value
    assert c.state == TrialState.FAIL and c.intermediate_values == {1: sign * 0.5}
    assert [t.user_attrs["status"] for t in (a, b, c)] == ["completed", "stopped_by_asha",
                                                           "failed"]
    assert [tune.records.trials[t]["status"] for t in "abc"] == ["completed", "stopped_by_asha",
                                                               "failed"]
    assert {t: tune.records.trials[t]["optuna_trial"] for t in "abc"} == {
        t: study[t].number for t in "abc"}  # the link, both ways


def test_a_trial_that_returned_before_max_t_by_itself_is_complete(sweep):
    tune = Tune(make_spec(), sweep)
    tune.start("r")
    tune.report("r", report(2, 0.4))
    tune.end("r", report(2, 0.4))  # ASHA did not stop it: it returned
    assert study_of(sweep)["r"].state == TrialState.COMPLETE
    assert tune.records.trials["r"]["status"] == "completed"


def test_diverged_and_never_reported_trials_fail_and_keep_their_finite_reports(sweep):
    tune = Tune(make_spec(), sweep)
    tune.start("d")
    tune.start("n")
    tune.report("d", report(1, 1.0))
    tune.report("d", report(1.5, math.inf, status="diverged"))
    tune.end("d", report(1.5, math.inf, status="diverged"))
    missing = {"epoch": 1, "val_loss": math.inf, OBJECTIVE_MISSING: True, "status": "completed"}
    tune.report("n", missing)
    tune.end("n", missing)
    study = study_of(sweep)
    assert study["d"].state == TrialState.FAIL and study["d"].intermediate_values == {1: 1.0}
    assert study["d"].user_attrs["status"] == "diverged"
    assert study["n"].state == TrialState.FAIL and not study["n"].intermediate_values
    assert study["n"].user_attrs["status"] == "failed"


def test_time_attr_time_keys_reports_by_seconds_and_prunes_at_a_rung(sweep):
    tune = Tune(make_spec(time_attr="time", max_t=90), sweep)
    for tid in ("fast", "slow"):
        tune.start(tid)
    tune.report("fast", {"time_total_s": 11.0, "epoch": 1, "val_loss": 1.0})
    tune.report("slow", {"time_total_s": 8.2, "epoch": 1, "val_loss": 3.0})
    assert tune.report("slow", {"time_total_s": 16.5, "epoch": 2, "val_loss": 2.5}) == "STOP"
    slow = study_of(sweep)["slow"]
    assert slow.state == TrialState.PRUNED
    assert slow.intermediate_values == {8: 3.0, 10: 2.5}  # judged at rung 10


def test_a_restarted_trial_does_not_report_a_step_twice(sweep):
    tune = Tune(make_spec(), sweep)
    tune.start("a")
    # restarted from its epoch-1 checkpoint after epoch 3; the repeats differ. Optuna keeps
    # a step's first value by itself: test_several_objectives.py has the case where only
    # the record's guard does (a study of several objectives).
    for e, value in ((1, 1.0), (2, 0.5), (3, 0.4), (2, 0.55), (3, 0.45), (4, 0.3)):
        tune.record.report("a", report(e, value))
    assert study_of(sweep)["a"].intermediate_values == pytest.approx(
        {1: 1.0, 2: 0.5, 3: 0.4, 4: 0.3})


def test_no_trial_beyond_the_plan_however_often_tune_asks_within_a_step(sweep):
    """Tune asks again as long as slots are free within one step; the searcher counts the
    trials it created itself, so the plan is exact: 3 planned, 2 slots."""
    tune = Tune(make_spec(num=3), sweep, slots=2)
    assert isinstance(tune.start("a"), dict) and isinstance(tune.start("b"), dict)
    assert tune.start("c") is None  # both slots busy: not now
    tune.report("a", report(1, 0.5))
    tune.end("a", report(1, 0.5))
    assert isinstance(tune.start("c"), dict)
    assert tune.start("d") == Searcher.FINISHED  # the plan is full: the search ends
    assert len(load_sweep_study(sweep).trials) == 3


def test_every_trial_end_flushes_the_journal_once(sweep):
    tune = Tune(make_spec(), sweep, slots=3)
    for tid in "abc":
        tune.start(tid)
    before = tune.journal.syncs
    tune.report("a", report(1, 0.5))
    assert tune.journal.syncs == before  # reports are appended, not flushed
    tune.end("a", report(1, 0.5))
    tune.end("b", error=True)
    assert tune.journal.syncs == before + 2


def test_a_resumed_sweep_continues_its_unfinished_trials_first_as_the_same_optuna_trials(sweep):
    spec = make_spec(num=4)
    first = Tune(spec, sweep, slots=2)
    first.start("a")
    first.start("b")
    first.report("a", report(1, 0.5))
    first.end("a", report(1, 0.5))
    first.report("b", report(1, 0.4))
    first.report("b", report(2, 0.35))
    params_b = {k: v for k, v in first.configs["b"].items() if k != TRIAL_ID_KEY}
    # the driver dies here: b is running; the tables were written before b's reports
    tables = TrialRecords(spec)
    tables.start("a", first.configs["a"])
    tables.start("b", first.configs["b"])
    write_tables(tables, sweep)

    second = Tune(spec, sweep, slots=2)
    assert second.records.trials["a"]["status"] == "completed"  # ended as the study says
    config = second.start("x1")  # Tune's new id for b
    assert config == {**params_b, TRIAL_ID_KEY: "b"}
    assert second.report("x1", report(3, 0.3)) == "CONTINUE"
    assert second.report("x1", report(9, 0.2, status="completed")) == "STOP"  # at max_t
    third = second.start("x2")
    assert third[TRIAL_ID_KEY] == "x2"  # then new trials, up to the plan
    assert second.start("x3")[TRIAL_ID_KEY] == "x3"
    assert second.start("x4") == Searcher.FINISHED
    study = load_sweep_study(sweep)
    assert [t.user_attrs["trial_id"] for t in study.trials] == ["a", "b", "x2", "x3"]
    b = study_of(sweep)["b"]
    assert b.state == TrialState.COMPLETE and b.intermediate_values == pytest.approx(
        {1: 0.4, 2: 0.35, 3: 0.3, 9: 0.2})


def test_the_search_is_held_back_only_while_the_share_keeps_it_below_its_slots(sweep):
    """While held back, ``SweepSearch.is_finished`` tells Tune the search is finished for
    now, so that Tune keeps no idle trial actor for reuse on a slot another sweep waits
    for (tests/cli/test_two_node_cluster.py runs it on a real cluster)."""
    class Ledger:
        def __init__(self, share):
            self.share = share

        def update(self, running, *, want=None, force=False, fresh=False):
            return self.share

        def confirmed(self, running, *, want=None):
            return self.share

        def close(self):
            pass

    spec = make_spec(num=6)
    tune = Tune(spec, sweep, slots=2)
    ledger = Ledger(share=1)
    tune.admission.ledger = ledger
    assert not tune.searcher.held_back()  # nothing runs: never finished while nothing runs
    tune.start("a")
    assert tune.start("b") is None  # held at its share of 1
    assert tune.searcher.held_back()
    ledger.share = 2
    assert not tune.searcher.held_back()
    assert isinstance(tune.start("b"), dict)
    assert not tune.searcher.held_back()  # at its own slots: not held back by anyone
