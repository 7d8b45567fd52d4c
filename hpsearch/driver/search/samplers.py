"""The Optuna samplers a sweep can use (``search.algorithm``), and one hpsearch adds.

:func:`make_sampler` builds what ``search`` asks for. :class:`QMCThenTPE` is the one
Optuna lacks: a low-discrepancy start, then TPE. TPE's start-up sampler is a fixed
``RandomSampler``, and ``QMCSampler`` hands every parameter outside its first trial's
search space to a random sampler, so :class:`QMCThenTPE` routes each trial, every hook of
it, to one of two samplers.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import optuna
from optuna.samplers import BaseSampler, QMCSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

from hpsearch.driver.internals import qmc_conditions_quiet
from hpsearch.driver.record.objectives import sampler_constraints
from hpsearch.space.spec import Spec

__all__ = ["QMCThenTPE", "make_sampler"]


def make_sampler(spec: Spec) -> optuna.samplers.BaseSampler:
    """The Optuna sampler ``spec.search`` asks for.

    * ``tpe``: ``TPESampler(seed=..., n_startup_trials=...)``, multivariate and with the
      constant liar (Optuna 5's defaults, given so that Optuna 4 samples the same way).
      With several objectives it is Optuna's multi-objective TPE; with constraints it
      learns from each trial's violations (:mod:`~hpsearch.driver.record.objectives`), as
      ``gp`` and ``qmc``'s TPE do.
      When some parameters are conditional, ``group=True`` lets the multivariate TPE model
      each sub-space instead of falling back to independent sampling for them.
    * ``random``: ``RandomSampler(seed)``.
    * ``gp``: ``GPSampler(seed=..., n_startup_trials=...)``, random start-up points. It
      fits only ``COMPLETE`` trials: under ASHA it learns from the trials that ran to
      ``max_t`` and ignores the stopped ones. Conditional parameters are sampled at random.
    * ``qmc``: the first ``n_startup_trials`` from a scrambled Sobol sequence, then TPE as
      for ``tpe`` (:class:`QMCThenTPE`).
    * ``nsga2``: ``NSGAIISampler(seed=..., population_size=n_startup_trials)`` (at least
      2), the genetic algorithm for several objectives; its generations are built from
      ``COMPLETE`` trials, so under ASHA from the trials that reach ``max_t``.
    """
    search = spec.search
    if search.algorithm == "random":
        return optuna.samplers.RandomSampler(seed=search.seed)
    conditional = bool(spec.conditional)
    constrained = sampler_constraints(len(spec.constraints))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if search.algorithm == "gp":
            quiet = {"warn_independent_sampling": False} if "warn_independent_sampling" in \
                inspect.signature(optuna.samplers.GPSampler).parameters else {}
            return optuna.samplers.GPSampler(
                seed=search.seed, n_startup_trials=search.n_startup_trials,
                independent_sampler=optuna.samplers.RandomSampler(seed=search.seed), **quiet,
                **constrained)
        if search.algorithm == "nsga2":
            return optuna.samplers.NSGAIISampler(
                seed=search.seed, population_size=max(2, search.n_startup_trials), **constrained)
        if search.algorithm == "qmc":
            return QMCThenTPE(n_qmc=search.n_startup_trials, seed=search.seed,
                              group=conditional, **constrained)
        return optuna.samplers.TPESampler(
            seed=search.seed, n_startup_trials=search.n_startup_trials, multivariate=True,
            constant_liar=True, group=conditional, **constrained)


class QMCThenTPE(BaseSampler):
    """Scrambled Sobol points for the first ``n_qmc`` trials, TPE afterwards.

    A trial is a QMC trial when fewer than ``n_qmc`` trials that did not fail come before
    it (running ones count, so concurrent trials still spread out).

    Args:
        n_qmc: How many trials come from the Sobol sequence.
        seed: Seeds the scrambling and TPE.
        **tpe_kwargs: Passed to ``TPESampler`` (``n_startup_trials`` is 0: QMC is the
            start-up).
    """

    def __init__(self, *, n_qmc: int = 10, seed: int | None = None, **tpe_kwargs: Any):
        self._n_qmc = n_qmc
        with warnings.catch_warnings():  # QMCSampler is experimental in Optuna 5
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._qmc = QMCSampler(qmc_type="sobol", scramble=True, seed=seed,
                                   warn_independent_sampling=False,
                                   warn_asynchronous_seeding=False)
            self._tpe = TPESampler(seed=seed, n_startup_trials=0, multivariate=True,
                                   constant_liar=True, **tpe_kwargs)
        self._choice: dict[int, BaseSampler] = {}

    def uses_qmc(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether ``trial`` takes its parameters from the Sobol sequence."""
        return self._pick(study, trial) is self._qmc

    def _pick(self, study: optuna.Study, trial: FrozenTrial) -> BaseSampler:
        sampler = self._choice.get(trial.number)
        if sampler is None:
            states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
            before = sum(1 for t in study.get_trials(deepcopy=False, states=states)
                         if t.number < trial.number)
            sampler = self._qmc if before < self._n_qmc else self._tpe
            self._choice[trial.number] = sampler
        return sampler

    def infer_relative_search_space(self, study, trial):  # noqa: ANN001, ANN201
        sampler = self._pick(study, trial)
        if sampler is not self._qmc:
            return sampler.infer_relative_search_space(study, trial)
        # While no trial has ended, QMCSampler warns on every ask that the running trials'
        # spaces differ ("assumes that the search space does not include any conditions"):
        # in a conditional space they do, and this sampler hands what lies outside the
        # Sobol space to a random sampler. Quiet for this call only.
        with qmc_conditions_quiet():
            return sampler.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):  # noqa: ANN001, ANN201
        return self._pick(study, trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):  # noqa: ANN001, ANN201
        return self._pick(study, trial).sample_independent(study, trial, param_name,
                                                           param_distribution)

    def before_trial(self, study, trial) -> None:  # noqa: ANN001
        self._pick(study, trial).before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:  # noqa: ANN001
        self._pick(study, trial).after_trial(study, trial, state, values)
        self._choice.pop(trial.number, None)

    def reseed_rng(self) -> None:
        self._qmc.reseed_rng()
        self._tpe.reseed_rng()
