"""A sweep of several objectives with a constraint, through the real searcher, study
journal, admission, records and MO-ASHA, with Tune's calls played by hand (#24): ASHA
stops the trial dominated at its rung, the study holds each trial's values and
violations, Optuna's front leaves the infeasible trial out, and a resume reads it all
back. Nothing here starts Ray."""

from __future__ import annotations

from dataclasses import replace

import optuna
from optuna.trial import TrialState
from ray.tune.schedulers import TrialScheduler

from hpsearch.driver.limits.admission import Admission
from hpsearch.driver.search.ids import TRIAL_ID_KEY
from hpsearch.driver.record.objectives import CONSTRAINTS_ATTR, directions
from hpsearch.driver.search.pareto import ParetoRungs
from hpsearch.driver.search.samplers import make_sampler
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.schedulers import SweepASHA, rung_values
from hpsearch.driver.search.searcher import SweepSearcher
from hpsearch.driver.record.study import load_sweep_study, recorded_trials
from hpsearch.space import parse_space
from hpsearch.space.spec import Constraint, Objective
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir

optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_spec():
    spec = parse_space({
        "name": "mo", "trainable": "digits", "objective": {"metric": "val_loss", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        "search": {"algorithm": "tpe", "seed": 3, "n_startup_trials": 2},
        "scheduler": {"type": "asha", "max_t": 3, "grace_period": 1, "reduction_factor": 3},
        "trials": {"num": 3},
    })
    return replace(spec, more_objectives=(Objective("samples_per_s", "max"),),
                   constraints=(Constraint("val_accuracy", min=0.5),))


class _Trial:
    def __init__(self, trial_id, config):
        self.trial_id, self.config = trial_id, config


def test_mo_asha_stops_the_dominated_trial_and_the_study_keeps_the_feasible_front(tmp_path):
    spec = make_spec()
    sweep = SweepDir(tmp_path / "mo")
    sweep.path.mkdir()
    record = SweepRecord(spec, sweep)
    record.open_study(directions=directions(spec.objectives), sampler=make_sampler(spec))
    searcher = SweepSearcher(record, admission=Admission(planned=3, slots=3))
    asha = SweepASHA(spec, record)
    assert isinstance(asha.rungs, ParetoRungs)
    # (val_loss, samples_per_s, val_accuracy) at epochs 1..3, one rung (epoch 1, keeping
    # the top third): a is first there; b, dominated by a, stops; c dominates both and
    # goes on, but misses the accuracy bound, so the front is a alone.
    curves = {"a": [(0.9, 1000, 0.6), (0.6, 1000, 0.7), (0.5, 1000, 0.8)],
              "b": [(1.2, 800, 0.6), (1.0, 800, 0.6), (0.9, 800, 0.6)],
              "c": [(0.8, 3000, 0.3), (0.75, 3000, 0.35), (0.7, 3000, 0.4)]}
    trials = {}
    for name in curves:
        config = searcher.suggest(name)
        trials[name] = _Trial(name, config)
        record.start(config[TRIAL_ID_KEY], config)
    ended = {}
    for epoch in (1, 2, 3):
        for name, curve in curves.items():
            if name in ended:
                continue
            loss, speed, acc = curve[epoch - 1]
            result = {"val_loss": loss, "samples_per_s": speed, "val_accuracy": acc,
                      "epoch": epoch, "training_iteration": epoch}
            decision = asha.on_trial_result(None, trials[name], result)
            record.report(trials[name].config[TRIAL_ID_KEY], result)
            if decision == TrialScheduler.STOP:
                asha.on_trial_complete(None, trials[name], result)
                searcher.on_trial_complete(name, result)
                ended[name] = epoch
    assert ended == {"b": 1, "a": 3, "c": 3}
    by_id = {t.user_attrs["trial_id"]: t for t in load_sweep_study(sweep).trials}
    a, b, c = by_id["a"], by_id["b"], by_id["c"]
    assert a.state == c.state == TrialState.COMPLETE and b.state == TrialState.PRUNED
    assert a.values == [0.5, 1000] and c.values == [0.7, 3000]
    assert b.user_attrs["status"] == st.STOPPED_BY_ASHA and a.user_attrs["status"] == st.COMPLETED
    assert c.user_attrs[CONSTRAINTS_ATTR][0] > 0 >= a.user_attrs[CONSTRAINTS_ATTR][0]
    front = load_sweep_study(sweep).best_trials
    assert [t.user_attrs["trial_id"] for t in front] == ["a"]  # c is infeasible
    # A resume reads every objective's report back and seeds MO-ASHA's rungs with them.
    recorded = {t.trial_id: t for t in recorded_trials(load_sweep_study(sweep))}
    assert recorded["a"].intermediate == {1: (0.9, 1000.0), 2: (0.6, 1000.0), 3: (0.5, 1000.0)}
    assert recorded["c"].value == (0.7, 3000.0)
    seeded = SweepASHA(spec, seeded=rung_values(recorded.values(), spec.scheduler.rungs()))
    # each trial's epoch-1 values, as higher-is-better scores (val_loss negated)
    assert seeded.rungs.recorded[1] == {"a": (-0.9, 1000.0), "b": (-1.2, 800.0),
                                        "c": (-0.8, 3000.0)}


def one_at_a_time(tmp_path, spec):
    """A sweep directory, its record and a searcher that runs one trial at a time."""
    sweep = SweepDir(tmp_path / spec.name)
    sweep.path.mkdir()
    record = SweepRecord(spec, sweep)
    record.open_study(directions=directions(spec.objectives))
    searcher = SweepSearcher(record, admission=Admission(planned=3, slots=1))
    return sweep, record, searcher


def test_one_objective_sweeps_tell_the_study_as_before(tmp_path):
    spec = replace(make_spec(), more_objectives=(), constraints=())
    sweep, record, searcher = one_at_a_time(tmp_path, spec)
    config = searcher.suggest("x")
    record.start(config[TRIAL_ID_KEY], config)
    for epoch, loss in ((1, 0.9), (2, 0.7), (3, 0.6)):
        result = {"val_loss": loss, "epoch": epoch, "training_iteration": epoch}
        record.report("x", result)
    searcher.on_trial_complete("x", result)
    (trial,) = load_sweep_study(sweep).trials
    assert trial.value == 0.6 and trial.intermediate_values == {1: 0.9, 2: 0.7, 3: 0.6}
    assert CONSTRAINTS_ATTR not in trial.user_attrs and "report:1" not in trial.user_attrs


def test_a_constraint_on_a_metric_the_first_report_lacks_stops_the_sweep_in_one_line(tmp_path):
    from hpsearch.driver.monitor.stops import SweepStopper

    spec = replace(make_spec(), constraints=(Constraint("val_acc", min=0.5),))
    _, record, searcher = one_at_a_time(tmp_path, spec)
    stopper = SweepStopper(record.rows, all_failed_after=3, problem=lambda: record.problem)
    config = searcher.suggest("a")
    record.start(config[TRIAL_ID_KEY], config)
    assert not stopper.stop_all()
    record.report("a", {"val_loss": 0.9, "samples_per_s": 900, "val_accuracy": 0.7,
                                   "epoch": 1, "training_iteration": 1})
    assert stopper.stop_all() and stopper.reason == "missing_metric"
    assert record.problem.startswith("the trial's first report has no "
                                       "constraints[0].metric: val_acc (did you mean "
                                       "`val_accuracy`?)")


def test_a_restarted_trial_reports_each_step_once_with_its_first_values(tmp_path):
    """A trial restarted from its epoch-1 checkpoint after epoch 3 reports epochs 2 and 3
    again, with other values (another data order). With one objective Optuna keeps the
    first value of a step itself; with several, each step is a trial attribute that a
    second report would overwrite, so the record must not send it."""
    spec = make_spec()
    sweep, record, searcher = one_at_a_time(tmp_path, spec)
    config = searcher.suggest("a")
    record.start(config[TRIAL_ID_KEY], config)
    curve = [(1, 0.9, 900), (2, 0.7, 910), (3, 0.6, 920),  # the first run
             (2, 0.75, 800), (3, 0.65, 810),               # restarted after epoch 1
             (4, 0.5, 930)]
    for epoch, loss, speed in curve:
        result = {"val_loss": loss, "samples_per_s": speed, "val_accuracy": 0.8,
                  "epoch": epoch, "training_iteration": epoch}
        record.report("a", result)
    searcher.on_trial_complete("a", result)
    (trial,) = load_sweep_study(sweep).trials
    reports = {k: v for k, v in trial.user_attrs.items() if k.startswith("report:")}
    assert reports == {"report:1": [0.9, 900], "report:2": [0.7, 910],
                       "report:3": [0.6, 920], "report:4": [0.5, 930]}
    assert trial.values == [0.5, 930]
