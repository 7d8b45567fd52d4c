"""The study tells Optuna the truth: SweepSearcher driven with hand-made Tune results.

Nothing here starts Ray. Each test plays Tune's part (suggest, on_trial_result,
on_trial_complete, save/restore) the way Ray 2.60's TuneController calls a searcher, and
reads the study back from its journal file.
"""

from __future__ import annotations

import math
import pickle

import optuna
import pytest
from optuna.trial import TrialState

from hpsearch.driver import live
from hpsearch.driver.search import make_searcher, make_scheduler
from hpsearch.driver.searcher import (
    SweepSearcher,
    load_sweep_study,
    open_study_storage,
    study_outcome,
    study_step,
)
from hpsearch.space import parse_space
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import OBJECTIVE_MISSING, TrialRecords

optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_spec(mode="min", *, max_t=9, time_attr="epoch", scheduler="asha", algorithm="tpe",
              params=None):
    params = params or {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                        "batch_size": 16}
    if time_attr == "time":
        params = {**params, "epochs": 20}
    return parse_space({
        "name": "s", "trainable": "digits", "objective": {"metric": "val_loss", "mode": mode},
        "params": params, "search": {"algorithm": algorithm, "seed": 3, "n_startup_trials": 2},
        "scheduler": {"type": scheduler, "time_attr": time_attr, "max_t": max_t,
                      "grace_period": 1 if time_attr != "time" else 10, "reduction_factor": 3},
    })


@pytest.fixture
def sweep(tmp_path):
    s = SweepDir.of(tmp_path / "s")
    s.path.mkdir()
    yield s
    live.register(s, None)


def searcher_for(spec, sweep, records=None):
    if records is not None:
        live.register(sweep, records)
    return make_searcher(spec, storage=open_study_storage(sweep), study_name="s",
                         sweep=str(sweep))


def report(epoch, value, **extra):
    return {"epoch": epoch, "val_loss": value, "training_iteration": int(epoch * 2),
            "status": "running", **extra}


def study_of(sweep):
    return {t.user_attrs["trial_id"]: t for t in load_sweep_study(sweep).trials}


# --- study steps ---------------------------------------------------------------------------


@pytest.mark.parametrize("t, reported, step", [
    (0.5, [], 0),             # before the first rung: floor
    (1.0, [0], 1),            # the first report at rung 1
    (1.5, [0, 1], 1),         # same floor as the rung: the caller skips it
    (2.0, [0, 1], 2),
    (3.4, [0, 1, 2], 3),      # first past rung 3: stored at 3
    (9.0, [3, 8], 9),         # max_t is a milestone too
])
def test_study_step_is_the_epoch_and_snaps_the_first_report_past_each_milestone(t, reported, step):
    assert study_step(t, (1, 3, 9), reported) == step


def test_study_step_in_seconds_puts_every_rung_decision_at_its_rung():
    # a slow trial reports at 17 s, 41 s: ASHA judged it at rungs 10 and 30 on those reports
    assert study_step(17.0, (10, 30, 90), [4]) == 10
    assert study_step(41.0, (10, 30, 90), [4, 10]) == 30
    assert study_step(44.0, (10, 30, 90), [4, 10, 30]) == 44


@pytest.mark.parametrize("status, value, reports, expected", [
    ("completed", 0.3, True, (TrialState.COMPLETE, 0.3)),
    ("completed", math.inf, True, (TrialState.FAIL, None)),
    ("stopped_by_asha", 0.9, True, (TrialState.PRUNED, None)),
    ("stopped", 0.9, True, (TrialState.PRUNED, None)),
    ("stopped", None, False, (TrialState.FAIL, None)),
    ("diverged", math.inf, True, (TrialState.FAIL, None)),
    ("unsupported_precision", math.inf, True, (TrialState.FAIL, None)),
    ("failed", None, True, (TrialState.FAIL, None)),
])
def test_each_trial_table_status_has_one_study_state(status, value, reports, expected):
    assert study_outcome(status, value=value, has_reports=reports) == expected


# --- a sweep played by hand ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["min", "max"])
def test_asha_stop_is_pruned_completion_is_complete_and_every_report_is_kept(sweep, mode):
    spec = make_spec(mode)
    records = TrialRecords(spec)
    searcher = searcher_for(spec, sweep, records)
    sign = 1 if mode == "min" else -1
    for tid in ("a", "b", "c"):
        records.start(tid, searcher.suggest(tid))
    # a: trained to max_t, reporting at every epoch; Tune sends the last report only to
    # on_trial_complete (ASHA said STOP at max_t).
    for e in range(1, 9):
        searcher.on_trial_result("a", report(e, sign * (1.0 / e)))
    searcher.on_trial_complete("a", report(9, sign * 0.1, status="completed"))
    # b: two reports per epoch; ASHA stopped it on its first report past rung 3.
    for e in (0.5, 1.0, 1.5, 2.0, 2.5):
        searcher.on_trial_result("b", report(e, sign * (2.0 - e / 10)))
    records.stopped_by_scheduler("b")
    records.trials["b"]["stopped_early"] = True
    searcher.on_trial_complete("b", report(3.0, sign * 1.7))
    # c: its code raised
    searcher.on_trial_result("c", report(1, sign * 3.0))
    searcher.on_trial_complete("c", error=True)

    study = study_of(sweep)
    a, b, c = study["a"], study["b"], study["c"]
    assert a.state == TrialState.COMPLETE and a.value == pytest.approx(sign * 0.1)
    assert sorted(a.intermediate_values) == list(range(1, 10))  # the last one included
    assert a.intermediate_values[9] == pytest.approx(sign * 0.1)
    assert b.state == TrialState.PRUNED
    assert b.intermediate_values == pytest.approx({0: sign * 1.95, 1: sign * 1.9,
                                                   2: sign * 1.8, 3: sign * 1.7})
    assert b.value == pytest.approx(sign * 1.7)  # Optuna: the last intermediate value
    assert c.state == TrialState.FAIL and c.intermediate_values == {1: sign * 3.0}
    assert [a.user_attrs["status"], b.user_attrs["status"], c.user_attrs["status"]] == [
        "completed", "stopped_by_asha", "failed"]
    # the link, both ways
    assert {tid: records.trials[tid]["optuna_trial"] for tid in "abc"} == {
        tid: study[tid].number for tid in "abc"}


def test_without_live_records_a_trial_that_ended_before_max_t_under_asha_is_pruned(sweep):
    spec = make_spec()
    searcher = searcher_for(spec, sweep)
    searcher.suggest("x")
    searcher.on_trial_complete("x", report(1, 2.0))
    assert study_of(sweep)["x"].state == TrialState.PRUNED


def test_a_trial_that_returned_before_max_t_by_itself_is_complete(sweep):
    spec = make_spec()
    records = TrialRecords(spec)
    searcher = searcher_for(spec, sweep, records)
    records.start("r", searcher.suggest("r"))
    searcher.on_trial_complete("r", report(2, 0.4))  # ASHA did not mark it: it returned
    assert study_of(sweep)["r"].state == TrialState.COMPLETE


def test_diverged_and_never_reported_trials_fail_and_keep_their_finite_reports(sweep):
    spec = make_spec()
    records = TrialRecords(spec)
    searcher = searcher_for(spec, sweep, records)
    for tid in ("d", "n"):
        records.start(tid, searcher.suggest(tid))
    searcher.on_trial_result("d", report(1, 1.0))
    searcher.on_trial_complete("d", report(1.5, math.inf, status="diverged"))
    searcher.on_trial_complete("n", {"epoch": 1, "val_loss": math.inf, OBJECTIVE_MISSING: True,
                                     "status": "completed"})
    study = study_of(sweep)
    assert study["d"].state == TrialState.FAIL and study["d"].intermediate_values == {1: 1.0}
    assert study["d"].user_attrs["status"] == "diverged"
    assert study["n"].state == TrialState.FAIL and not study["n"].intermediate_values
    assert study["n"].user_attrs["status"] == "failed"


def test_time_attr_time_keys_reports_by_seconds_and_prunes_at_a_rung(sweep):
    spec = make_spec(time_attr="time", max_t=90)
    records = TrialRecords(spec)
    searcher = searcher_for(spec, sweep, records)
    records.start("slow", searcher.suggest("slow"))
    searcher.on_trial_result("slow", {"time_total_s": 8.2, "epoch": 1, "val_loss": 3.0})
    records.trials["slow"]["stopped_early"] = True
    searcher.on_trial_complete("slow", {"time_total_s": 16.5, "epoch": 2, "val_loss": 2.5})
    slow = study_of(sweep)["slow"]
    assert slow.state == TrialState.PRUNED
    assert slow.intermediate_values == {8: 3.0, 10: 2.5}  # judged at rung 10


def test_a_restarted_trial_does_not_report_a_step_twice(sweep):
    spec = make_spec()
    searcher = searcher_for(spec, sweep)
    searcher.suggest("a")
    for e in (1, 2, 3, 2, 3, 4):  # restarted from its epoch-1 checkpoint after epoch 3
        searcher.on_trial_result("a", report(e, 1.0 / e))
    assert study_of(sweep)["a"].intermediate_values == pytest.approx(
        {1: 1.0, 2: 0.5, 3: 1 / 3, 4: 0.25})


# --- resume --------------------------------------------------------------------------------


def test_resume_adopts_a_trial_asked_after_the_last_save_and_prunes_one_that_reported(
        sweep, tmp_path):
    """Tune saved the searcher after `a` started; then `b` (reported), `c` (never
    reported) and `d` (reported, no row written) were asked, and `a` finished; then the
    driver died."""
    spec = make_spec()
    records = TrialRecords(spec)
    searcher = searcher_for(spec, sweep, records)
    records.start("a", searcher.suggest("a"))
    searcher.on_trial_result("a", report(1, 1.0))
    state = tmp_path / "searcher-state.pkl"
    searcher.save(str(state))
    records.start("b", searcher.suggest("b"))
    searcher.on_trial_result("b", report(1, 2.0))
    c_params = searcher.suggest("c")
    d_params = searcher.suggest("d")  # started and reported; the tables never saw it
    searcher.on_trial_result("d", report(1, 2.5))
    searcher.on_trial_complete("a", report(9, 0.2, status="completed"))  # after the save

    # the new driver: Tune unpickles the searcher and restores its saved state
    again = TrialRecords(spec)
    again.start("a", {})
    again.start("b", {})
    resumed = pickle.loads(pickle.dumps(searcher_for(spec, sweep, again)))
    resumed.restore(str(state))
    study = study_of(sweep)
    assert study["b"].state == TrialState.PRUNED and study["b"].user_attrs["status"] == "stopped"
    assert study["d"].state == TrialState.PRUNED
    # d gets its row now, so it counts against trials.num
    assert again.trials["d"]["status"] == "stopped" and again.trials["d"]["lr"] == d_params["lr"]
    # b's row was written before its report reached the table: kept, not dropped as never
    # reported at the first step (else a new trial runs in its place: 9 of 8 planned)
    assert again.forget_unfinished_except({"a"}) == []
    assert again.trials["b"]["status"] == "stopped"
    assert again.trials["b"]["optuna_trial"] == study["b"].number
    # Tune reruns `a` (its saved state says running); the study already has its result
    resumed.on_trial_result("a", report(1, 1.0))
    resumed.on_trial_complete("a", report(9, 0.2, status="completed"))
    # the first new trial takes over `c`: same Optuna trial, same parameters
    assert resumed.suggest("e") == c_params
    resumed.on_trial_complete("e", report(9, 0.3, status="completed"))
    study = study_of(sweep)
    assert set(study) == {"a", "b", "d", "e"}
    assert study["e"].user_attrs["adopted_from"] == "c"
    assert study["a"].state == study["e"].state == TrialState.COMPLETE
    assert len(load_sweep_study(sweep).trials) == 4  # no phantom trial


def test_settle_study_ends_the_unfinished_and_gives_every_trial_a_row(sweep):
    from hpsearch.driver.repairs import settle_study

    spec = make_spec()
    records = TrialRecords(spec)
    searcher = searcher_for(spec, sweep, records)
    records.start("ran", searcher.suggest("ran"))
    searcher.on_trial_result("ran", report(1, 1.0))
    records.result("ran", report(1, 1.0))
    pending = searcher.suggest("pending")  # asked; the time budget ended the sweep first
    records.stop_unfinished()
    told = settle_study(sweep, records)
    study = study_of(sweep)
    assert told == {study["ran"].number: "PRUNED", study["pending"].number: "FAIL"}
    assert records.trials["pending"]["status"] == "stopped"
    assert records.trials["pending"]["lr"] == pending["lr"]
    assert records.trials["pending"]["optuna_trial"] == study["pending"].number
    assert study["pending"].user_attrs["status"] == "stopped"


def test_the_searcher_pickles_with_its_links(sweep):
    spec = make_spec()
    searcher = searcher_for(spec, sweep)
    searcher.suggest("a")
    copy = pickle.loads(pickle.dumps(searcher))
    assert isinstance(copy, SweepSearcher) and copy._links == {"a": 0}
    assert copy.spec == spec


def test_a_searcher_pickled_before_these_attributes_existed_still_reports(sweep, tmp_path):
    spec = make_spec()
    searcher = searcher_for(spec, sweep)
    searcher.suggest("a")
    for name in ("spec", "_links", "_keys", "_told", "_reported", "_orphans"):
        del searcher.__dict__[name]  # what an older hpsearch pickled
    path = tmp_path / "old.pkl"
    searcher.save(str(path))
    fresh = searcher_for(spec, sweep)
    fresh.restore(str(path))
    fresh.spec = spec  # restore_tuner sets it from space.yaml
    fresh.on_trial_complete("a", report(9, 0.5, status="completed"))
    (trial,) = load_sweep_study(sweep).trials
    assert trial.state == TrialState.COMPLETE and trial.intermediate_values == {9: 0.5}


def test_the_asha_scheduler_counts_seconds_with_time_attr_time():
    scheduler = make_scheduler(make_spec(time_attr="time", max_t=90))
    assert scheduler._time_attr == "time_total_s" and scheduler._max_t == 90
    assert sorted(r[0] for r in scheduler._brackets[0]._rungs)[:2] == [10, 30]


# --- samplers ------------------------------------------------------------------------------


def test_gp_and_qmc_samplers_are_what_the_space_asks_for():
    from hpsearch.driver.samplers import QMCThenTPE
    from hpsearch.driver.search import make_sampler

    gp = make_sampler(make_spec(algorithm="gp"))
    assert isinstance(gp, optuna.samplers.GPSampler)
    qmc = make_sampler(make_spec(algorithm="qmc"))
    assert isinstance(qmc, QMCThenTPE) and qmc._n_qmc == 2


def test_qmc_then_tpe_takes_sobol_points_first_then_tpe():
    from hpsearch.driver.samplers import QMCThenTPE

    def objective(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        y = trial.suggest_int("y", 0, 8)
        return (x - 0.3) ** 2 + (y - 2) ** 2 / 64

    ours = optuna.create_study(sampler=QMCThenTPE(n_qmc=6, seed=1))
    ours.optimize(objective, n_trials=12)
    sobol = optuna.create_study(sampler=optuna.samplers.QMCSampler(
        qmc_type="sobol", scramble=True, seed=1, warn_independent_sampling=False))
    sobol.optimize(objective, n_trials=6)
    assert [t.params for t in ours.trials[:6]] == [t.params for t in sobol.trials]
    tpe = ours.sampler
    assert not tpe.uses_qmc(ours, ours.trials[7])
    assert pickle.loads(pickle.dumps(tpe))._n_qmc == 6


def test_the_journal_reaches_the_file_at_once_and_the_disk_where_a_trial_ends(tmp_path,
                                                                               monkeypatch):
    """Every journal append is in the file when the call returns (another reader sees a
    running trial's reports), but only a trial's creation and its end are fsync-ed: about
    2 flushes per trial instead of one per operation."""
    import os

    from optuna.storages.journal._storage import JournalOperation

    from hpsearch.driver.searcher import RUNNING_TRIAL_OPS, open_study_storage

    assert RUNNING_TRIAL_OPS == {JournalOperation[name].value for name in (
        "SET_TRIAL_PARAM", "SET_TRIAL_INTERMEDIATE_VALUE", "SET_TRIAL_USER_ATTR",
        "SET_TRIAL_SYSTEM_ATTR")}
    sweep = SweepDir.of(tmp_path)
    study = optuna.create_study(storage=open_study_storage(sweep), study_name="s")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    trial = study.ask()
    assert len(synced) == 1  # its creation
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    trial.set_user_attr("trial_id", "abc")
    for step in range(3):
        trial.report(1.0 / (step + 1), step)
    assert len(synced) == 1
    reader = optuna.load_study(storage=open_study_storage(sweep), study_name="s")
    seen = reader.trials[0]
    assert seen.intermediate_values == {0: 1.0, 1: 0.5, 2: 1 / 3}
    assert seen.user_attrs == {"trial_id": "abc"} and "lr" in seen.params
    study.tell(trial, 0.25)
    assert len(synced) == 2  # its end
    again = optuna.load_study(storage=open_study_storage(sweep), study_name="s").trials[0]
    assert again.state == TrialState.COMPLETE and again.value == 0.25
