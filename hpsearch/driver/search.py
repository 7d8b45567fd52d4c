"""A validated :class:`Spec` -> the Optuna and Ray Tune objects that run the search.

Pure functions: each builds an object from the spec and touches nothing else. Ray and
Optuna are imported inside the functions, so importing this module stays cheap.

The search space is given to Optuna *define-by-run*: :func:`define_by_run` returns a
callable that suggests every searched parameter in file order, and a conditional one only
when its condition holds. Fixed values are not suggested; :meth:`Spec.trial_config` adds
them to what Optuna samples.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable

from hpsearch.space.spec import CategoricalParam, FloatParam, IntParam, Param, Spec

if TYPE_CHECKING:
    import optuna
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search.optuna import OptunaSearch

__all__ = ["define_by_run", "make_sampler", "make_scheduler", "make_searcher"]


class _DefineByRun:
    """Suggests a spec's parameters on an Optuna trial.

    A class rather than a closure so that it pickles: Tune saves the searcher, this
    included, with ``pickle`` when it checkpoints an experiment.
    """

    def __init__(self, params: tuple[Param, ...]):
        self.params = params

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        sampled: dict[str, Any] = {}
        for param in self.params:
            if param.when is None or param.when.holds(sampled):
                sampled[param.name] = _suggest(trial, param)
        return sampled

    def __repr__(self) -> str:
        return f"define_by_run({', '.join(p.name for p in self.params)})"


def _suggest(trial: optuna.Trial, param: Param) -> Any:
    if isinstance(param, FloatParam):
        return trial.suggest_float(param.name, param.low, param.high, step=param.step,
                                   log=param.log)
    if isinstance(param, IntParam):
        return trial.suggest_int(param.name, param.low, param.high, step=param.step,
                                 log=param.log)
    if isinstance(param, CategoricalParam):
        return trial.suggest_categorical(param.name, list(param.choices))
    raise TypeError(f"unknown parameter type {type(param).__name__}")


def define_by_run(spec: Spec) -> _DefineByRun:
    """The search space as an Optuna define-by-run function.

    Args:
        spec: A validated spec.

    Returns:
        A picklable callable ``f(trial) -> dict`` that suggests each searched parameter in
        file order (``low`` and ``high`` inclusive, ``log`` and ``step`` as written) and
        returns the sampled values. Fixed values are not included.

    Example:
        >>> import optuna
        >>> study = optuna.create_study(sampler=make_sampler(spec))  # doctest: +SKIP
        >>> study.optimize(lambda t: train(spec.trial_config(define_by_run(spec)(t))))
    """
    return _DefineByRun(tuple(spec.params))


def make_sampler(spec: Spec) -> optuna.samplers.BaseSampler:
    """The Optuna sampler ``spec.search`` asks for.

    * ``tpe``: ``TPESampler(seed=..., n_startup_trials=...)``. When some parameters are
      conditional, ``group=True`` lets the multivariate TPE model each sub-space instead
      of falling back to independent sampling for them.
    * ``random``: ``RandomSampler(seed)``.
    * ``gp``: ``GPSampler(seed=..., n_startup_trials=...)``, random start-up points. It
      fits only ``COMPLETE`` trials: under ASHA it learns from the trials that ran to
      ``max_t`` and ignores the stopped ones. Conditional parameters are sampled at random.
    * ``qmc``: the first ``n_startup_trials`` from a scrambled Sobol sequence, then TPE as
      for ``tpe`` (:class:`hpsearch.driver.samplers.QMCThenTPE`).
    """
    import optuna

    search = spec.search
    if search.algorithm == "random":
        return optuna.samplers.RandomSampler(seed=search.seed)
    conditional = any(p.when is not None for p in spec.params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if search.algorithm == "gp":
            return optuna.samplers.GPSampler(
                seed=search.seed, n_startup_trials=search.n_startup_trials,
                independent_sampler=optuna.samplers.RandomSampler(seed=search.seed),
                warn_independent_sampling=False,
            )
        if search.algorithm == "qmc":
            from hpsearch.driver.samplers import QMCThenTPE

            return QMCThenTPE(n_qmc=search.n_startup_trials, seed=search.seed,
                              group=conditional)
        return optuna.samplers.TPESampler(
            seed=search.seed, n_startup_trials=search.n_startup_trials, group=conditional
        )


def make_searcher(spec: Spec, *, storage: optuna.storages.BaseStorage | None = None,
                  study_name: str | None = None, sweep: str | None = None,
                  may_start: Callable[..., bool | None] | None = None) -> OptunaSearch:
    """A Tune searcher over :func:`define_by_run` with :func:`make_sampler`.

    It is a :class:`hpsearch.driver.searcher.SweepSearcher`: an ``OptunaSearch`` that
    tells the study every report at its ``time_attr`` step and how each trial ended
    (``COMPLETE``, ``PRUNED`` for a trial ASHA stopped, ``FAIL``).

    Args:
        spec: A validated spec; its objective gives ``metric`` and ``mode``.
        storage: Where Optuna keeps the study, e.g.
            ``optuna.storages.JournalStorage(JournalFileBackend(path))``; ``None`` keeps it
            in memory (Tune still pickles it with the experiment).
        study_name: The study's name in ``storage``.
        sweep: The sweep directory's path: the searcher links each trial in the live
            trial records, and reopens the study there when the sweep is resumed.
        may_start: Asked before each new trial, with ``trial_id=``; ``False`` ends the
            search (no new trial), ``None`` means not now.
            Must be picklable: Tune saves the searcher with the experiment.

    Raises:
        TypeError: ``storage`` is not an Optuna storage object (OptunaSearch does not
            accept URL strings).
    """
    import optuna

    if storage is not None and not isinstance(storage, optuna.storages.BaseStorage):
        raise TypeError(
            "storage must be an optuna.storages.BaseStorage instance such as "
            f"JournalStorage(JournalFileBackend(path)), not {type(storage).__name__}"
        )
    from hpsearch.driver.searcher import SweepSearcher

    searcher = SweepSearcher(
        space=define_by_run(spec),
        metric=spec.objective.metric,
        mode=spec.objective.mode,
        sampler=make_sampler(spec),
        storage=storage,
        study_name=study_name,
        spec=spec,
        sweep=sweep,
    )
    searcher.may_start = may_start
    return searcher


def make_scheduler(spec: Spec, *, sweep: str | None = None) -> ASHAScheduler | FIFOScheduler:
    """ASHA or FIFO, as ``spec.scheduler`` asks.

    ASHA compares trials on ``spec.scheduler.time_attr`` (``epoch`` or ``step``, which
    trainables report, or ``time``: Tune's ``time_total_s``, the trial's own seconds) and
    on the objective's metric and mode, so do not also pass
    ``metric``/``mode`` to ``TuneConfig`` (Tune rejects it twice). With ``sweep``, the
    trials it stops early are marked in that sweep's live records (so a trial that
    returned on its own before ``max_t`` is not mistaken for one ASHA stopped).
    """
    from hpsearch.driver.scheduler import SweepASHA, SweepFIFO

    s = spec.scheduler
    if s.type == "fifo":
        return SweepFIFO(sweep=sweep)
    return SweepASHA(
        sweep=sweep,
        time_attr=s.result_key,
        metric=spec.objective.metric,
        mode=spec.objective.mode,
        max_t=s.max_t,
        grace_period=s.grace_period,
        reduction_factor=s.reduction_factor,
    )
