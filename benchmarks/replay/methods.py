"""The search methods a replay compares, each built as its users build it.

Every method is a *driver* with three calls, the three moments of a trial's life:

* ``start(tune_id)`` returns ``(key, params)`` for a new trial, or ``None`` (nothing now);
* ``report(key, result)`` hands it one evaluation (a Tune result dict) and returns whether
  the trial is stopped there;
* ``end(key, result)`` says the trial ended (stopped, or at its last evaluation).

The drivers call the methods' own objects through their public interfaces, in the order
Ray Tune's controller calls them (scheduler first; the searcher hears a result only when
the trial goes on, and its end with the last result):

* :class:`HpsearchDriver`: hpsearch's :class:`~hpsearch.driver.search.searcher.SweepSearcher`,
  :func:`~hpsearch.driver.search.schedulers.make_scheduler` and the tables callback over
  one :class:`~hpsearch.driver.record.sweep_record.SweepRecord` (in memory), the sampler
  (:func:`~hpsearch.driver.search.samplers.make_sampler`) and the admission, built as
  ``hpsearch run`` builds them from the space file (``driver/sweep/fit.py``), and the
  sweep's stopper on the replay's clock, which ends the replay at its budget (``over``);
  without the journal and tables files, the ledger and the disk watch, which decide
  nothing in a replay.
* :class:`RayStockDriver`: Ray Tune's ``OptunaSearch`` (its default TPE) and
  ``ASHAScheduler`` on ``training_iteration``, as the Tune docs write them: a trial ASHA
  stops is told to Optuna as complete with its last value.
* :class:`OptunaDriver`: Optuna alone: ``TPESampler(seed)`` with a pruner, the trial
  asking ``should_prune`` after each report, 4 trials sharing one study.
* :class:`~benchmarks.replay.peers.SyneTuneDriver`: Syne Tune's ASHA and BOHB, called in
  its own ``Tuner``'s order (:mod:`benchmarks.replay.peers`; Syne Tune is optional).

:data:`METHODS` names them.

``dehb`` is DEHB through its own ask/tell, one job a trial run to the job's fidelity
(:class:`~benchmarks.replay.dehb_method.DehbDriver`; DEHB is optional).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Mapping

import optuna

from benchmarks.replay import dehb_method, peers
from benchmarks.replay.peers import SYNE_METHODS
from hpsearch.space.spec import Spec

__all__ = ["METHODS", "REPLAY_SECONDS_PER_R", "build", "parse_method", "replay_spec",
           "unavailable"]

optuna.logging.set_verbosity(optuna.logging.ERROR)


def unavailable(method: str) -> str | None:
    """What ``method`` needs that is not installed (Syne Tune, DEHB), as the end of a line
    that starts with its name; ``None`` when it can run here."""
    return peers.unavailable(method) or dehb_method.unavailable(method)

#: A replay reports ``time_total_s`` in replay seconds: time(R) is this many of them, so
#: that time-based ASHA's integer rungs (``grace_period``, ``max_t``) fit any table.
REPLAY_SECONDS_PER_R = 60


@dataclass
class _Trial:
    """What Tune's schedulers read of a trial: its id and its config."""

    trial_id: str
    config: dict


@dataclass
class _TuneTrial(_Trial):
    """What Tune's callbacks read of a trial besides: its last checkpoint (none here)."""

    checkpoint: Any = None
    error_file: Any = None


def _stop() -> str:
    from ray.tune.schedulers import TrialScheduler

    return TrialScheduler.STOP


class HpsearchDriver:
    """hpsearch's plug-ins for ``spec``, at ``workers`` trials at once, over one
    :class:`~hpsearch.driver.record.sweep_record.SweepRecord` in memory: the searcher asks
    and ends trials through it, ASHA marks the trials it stops there, and the tables
    callback feeds it each start and report, in the order Tune's controller calls them."""

    def __init__(self, spec: Spec, *, workers: int):
        from ray.tune.search import Searcher

        from hpsearch.driver.limits.admission import Admission
        from hpsearch.driver.monitor.tables import TablesCallback
        from hpsearch.driver.record.sweep_record import SweepRecord
        from hpsearch.driver.search.plugins import open_search

        self.spec = spec
        self.record = SweepRecord.in_memory(spec)
        # The search as `hpsearch run` opens it (driver/sweep/fit.py): the study with the
        # run's sampler, the searcher and ASHA.
        search = open_search(self.record, Admission(planned=spec.trials.num, slots=workers))
        self.study, self.records = self.record.study, self.record.rows
        self.searcher, self.scheduler = search.searcher, search.scheduler
        self.tables = TablesCallback(self.record)
        self.finished = Searcher.FINISHED
        self.trials: dict[str, _TuneTrial] = {}
        self.stopper: Any = None  # the sweep's stopper, on the replay's clock (``over``)
        self.now = 0.0

    def over(self, now: float, budget: float) -> bool:
        """Whether the sweep ends at ``now``: asked by the replay's loop before each
        evaluation, as Tune asks the sweep's stopper at each step. The stopper is the one
        ``hpsearch run`` builds (``driver/sweep/fit.py``), on the replay's clock, with the
        replay's ``budget`` as ``budget.time`` (both in time(R) units), so its time budget
        and its all-failed rule end the replay."""
        from hpsearch.driver.monitor.stops import SweepStopper

        if self.stopper is None:  # its clock starts at the replay's 0
            self.stopper = SweepStopper(self.records, time_budget_s=budget,
                                        all_failed_after=min(self.spec.trials.num, 3),
                                        clock=lambda: self.now)
        self.now = now
        return self.stopper.stop_all()

    def start(self, tune_id: str) -> tuple[str, dict] | None:
        from hpsearch.driver.search.ids import TRIAL_ID_KEY

        config = self.searcher.suggest(tune_id)
        if config is None or config == self.finished:
            return None
        key = config[TRIAL_ID_KEY]
        params = {k: v for k, v in config.items() if k != TRIAL_ID_KEY}
        trial = self.trials[key] = _TuneTrial(tune_id, config)
        self.tables.on_trial_start(0, [], trial)
        return key, params

    def report(self, key: str, result: dict) -> bool:
        trial = self.trials[key]
        stop = self.scheduler.on_trial_result(None, trial, result) == _stop()
        if not stop:
            self.searcher.on_trial_result(trial.trial_id, result)
        self.tables.on_trial_result(0, [], trial, result)
        return stop

    def end(self, key: str, result: dict) -> None:
        trial = self.trials.pop(key)
        self.scheduler.on_trial_complete(None, trial, result)
        self.searcher.on_trial_complete(trial.trial_id, result)
        self.tables.on_trial_complete(0, [], trial)


class RayStockDriver:
    """``OptunaSearch(space, metric, mode, seed)`` + ``ASHAScheduler`` with the space
    file's rungs, on ``training_iteration`` (one per report: per epoch here)."""

    def __init__(self, spec: Spec, *, workers: int):
        from ray.tune.schedulers import ASHAScheduler
        from ray.tune.search.optuna import OptunaSearch

        from hpsearch.driver.search.space import distributions

        metric, mode, s = spec.objective.metric, spec.objective.mode, spec.scheduler
        self.searcher = OptunaSearch(space=distributions(spec), metric=metric, mode=mode,
                                     seed=spec.search.seed)
        self.scheduler = ASHAScheduler(time_attr="training_iteration", metric=metric,
                                       mode=mode, max_t=s.max_t, grace_period=s.grace_period,
                                       reduction_factor=s.reduction_factor)
        self.trials: dict[str, _Trial] = {}

    def start(self, tune_id: str) -> tuple[str, dict] | None:
        config = self.searcher.suggest(tune_id)
        if config is None:
            return None
        trial = self.trials[tune_id] = _Trial(tune_id, config)
        self.scheduler.on_trial_add(None, trial)
        return tune_id, config

    def report(self, key: str, result: dict) -> bool:
        stop = self.scheduler.on_trial_result(None, self.trials[key], result) == _stop()
        if not stop:
            self.searcher.on_trial_result(key, result)
        return stop

    def end(self, key: str, result: dict) -> None:
        self.scheduler.on_trial_complete(None, self.trials.pop(key), result)
        self.searcher.on_trial_complete(key, result)


class OptunaDriver:
    """Optuna alone: ``TPESampler(seed=seed)`` and ``pruner``; each trial reports at its
    epoch and stops when ``should_prune()`` says so, as an Optuna objective would."""

    def __init__(self, spec: Spec, *, workers: int, pruner: Any):
        from hpsearch.driver.search.space import define_by_run

        self.metric = spec.objective.metric
        # Named by the seed: HyperbandPruner puts a trial in a bracket by a CRC of the
        # study's name and the trial's number, and an unnamed study gets a random name,
        # so an unnamed replay would not repeat.
        self.study = optuna.create_study(
            study_name=f"replay-seed-{spec.search.seed}",
            direction="minimize" if spec.objective.mode == "min" else "maximize",
            sampler=optuna.samplers.TPESampler(seed=spec.search.seed), pruner=pruner)
        self.define = define_by_run(spec)
        self.live: dict[str, Any] = {}

    def start(self, tune_id: str) -> tuple[str, dict] | None:
        trial = self.live[tune_id] = self.study.ask()
        return tune_id, self.define(trial)

    def report(self, key: str, result: dict) -> bool:
        trial, value = self.live[key], result[self.metric]
        if not math.isfinite(value):
            return False  # the objective raises nothing: the trial goes on
        trial.report(value, step=int(result["epoch"]))
        return trial.should_prune()

    def end(self, key: str, result: dict) -> None:
        trial, value = self.live.pop(key), result[self.metric]
        if trial.should_prune():
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif math.isfinite(value):
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)


def replay_spec(spec: Spec, *, seed: int, search: Mapping[str, Any] | None = None,
                scheduler: Mapping[str, Any] | None = None) -> Spec:
    """``spec`` for one replay: seeded, with no cap on trials (the budget ends a replay),
    and the ``search`` and ``scheduler`` fields given changed. ``progressive`` without
    ``brackets`` gets one bracket, as a space file that asks for PASHA does."""
    scheduler = dict(scheduler or {})
    if scheduler.get("progressive") and "brackets" not in scheduler:
        scheduler["brackets"] = 1
    return replace(spec, search=replace(spec.search, seed=seed, **(search or {})),
                   scheduler=replace(spec.scheduler, **scheduler),
                   trials=replace(spec.trials, num=10**9))


def _time_rungs(spec: Spec) -> dict[str, Any]:
    """time-based ASHA's rungs at the same points of an fp32 run as the space's epoch
    rungs: ``grace_period`` epochs of time(R)'s ``max_t`` epochs, in replay seconds."""
    s = spec.scheduler
    per_epoch = REPLAY_SECONDS_PER_R / s.max_t
    return {"time_attr": "time", "grace_period": round(s.grace_period * per_epoch),
            "max_t": REPLAY_SECONDS_PER_R}


def _optuna(pruner: Callable[[Spec], Any]) -> Callable[..., OptunaDriver]:
    return lambda spec, *, workers: OptunaDriver(spec, workers=workers, pruner=pruner(spec))


def _dehb(spec: Spec, *, workers: int) -> Any:
    from benchmarks.replay.dehb_method import DehbDriver

    return DehbDriver(spec, workers=workers)


#: ``name -> (one line for people, how the spec changes, the driver)``.
METHODS: dict[str, tuple[str, Callable[[Spec], dict[str, Any]], Callable[..., Any]]] = {
    "hpsearch": ("hpsearch default: the space file's search (Sobol start, then TPE) + ASHA",
                 lambda s: {}, HpsearchDriver),
    "random-asha": ("random + hpsearch's ASHA", lambda s: {"search": {"algorithm": "random"}},
                    HpsearchDriver),
    "random-fifo": ("random, every trial to max_t",
                    lambda s: {"search": {"algorithm": "random"}, "scheduler": {"type": "fifo"}},
                    HpsearchDriver),
    "gp-asha": ("GP + ASHA (search.algorithm: gp)", lambda s: {"search": {"algorithm": "gp"}},
                HpsearchDriver),
    "tpe-asha": ("TPE + ASHA (search.algorithm: tpe; the default before qmc)",
                 lambda s: {"search": {"algorithm": "tpe"}}, HpsearchDriver),
    "time-asha": ("TPE + ASHA on time (scheduler.time_attr: time)",
                  lambda s: {"scheduler": _time_rungs(s)}, HpsearchDriver),
    "ray-stock": ("Ray Tune stock: OptunaSearch + ASHAScheduler", lambda s: {}, RayStockDriver),
    "dehb": ("DEHB (its own ask/tell): DE + Hyperband, a job a trial to its fidelity",
             lambda s: {}, _dehb),
    "optuna-sha": ("Optuna alone: TPE + SuccessiveHalvingPruner (same rungs)", lambda s: {},
                   _optuna(lambda s: optuna.pruners.SuccessiveHalvingPruner(
                       min_resource=s.scheduler.grace_period,
                       reduction_factor=s.scheduler.reduction_factor))),
    "optuna-hb": ("Optuna alone: TPE + HyperbandPruner", lambda s: {},
                  _optuna(lambda s: optuna.pruners.HyperbandPruner(
                      min_resource=s.scheduler.grace_period, max_resource=s.scheduler.max_t,
                      reduction_factor=s.scheduler.reduction_factor))),
    **{name: (label, lambda s: {}, driver) for name, (label, driver) in SYNE_METHODS.items()},
}


def parse_method(method: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """``(name, {section: {field: value}})`` of a method and the settings it changes.

    A method is one of :data:`METHODS`, optionally followed by ``@section.field=value``
    items that change the space file's ``search`` or ``scheduler`` section, to try a
    setting side by side with the default: ``hpsearch@search.n_startup_trials=16``,
    ``hpsearch@scheduler.reduction_factor=4@scheduler.grace_period=2``. Values are read as
    JSON where they parse (numbers, ``true``), as text otherwise.

    >>> parse_method("hpsearch@search.n_startup_trials=16@search.algorithm=qmc")
    ('hpsearch', {'search': {'n_startup_trials': 16, 'algorithm': 'qmc'}})
    """
    from hpsearch.space.spec import Scheduler, Search

    name, *items = method.split("@")
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    known = {"search": {f.name for f in fields(Search)},
             "scheduler": {f.name for f in fields(Scheduler)}}
    changes: dict[str, dict[str, Any]] = {}
    for item in items:
        key, eq, text = item.partition("=")
        section, _, field_name = key.partition(".")
        if not eq or field_name not in known.get(section, ()):
            raise ValueError(f"{method}: {item!r} is not search.FIELD=VALUE or "
                             f"scheduler.FIELD=VALUE with a field of that section")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        changes.setdefault(section, {})[field_name] = value
    return name, changes


def build(method: str, spec: Spec, *, seed: int, workers: int) -> tuple[Spec, Any]:
    """The replay spec and the driver of ``method`` (:func:`parse_method`) for the space
    ``spec``."""
    name, settings = parse_method(method)
    _, changes, driver = METHODS[name]
    merged = changes(spec)
    for section, values in settings.items():
        merged[section] = {**merged.get(section, {}), **values}
    run_spec = replay_spec(spec, seed=seed, **merged)
    return run_spec, driver(run_spec, workers=workers)
