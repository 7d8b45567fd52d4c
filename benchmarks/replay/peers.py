"""Peers from other packages, driven on the replay's curves: Syne Tune's schedulers (#38).

Syne Tune (``pip install syne-tune``, or hpsearch's ``bench`` extra) is not a dependency
of hpsearch: it is imported when one of its methods is built, and a missing package is
one line (:func:`unavailable`) before anything runs; every other method runs without it.

:class:`SyneTuneDriver` calls a Syne Tune scheduler as its own ``Tuner`` does with the
simulator backend (``syne_tune/tuner.py``): ``suggest()`` for a free worker, then
``on_trial_add``; ``on_trial_result`` for each report, and when that says ``STOP`` (or
``PAUSE``, which the replay cannot resume) ``on_trial_remove``; ``on_trial_complete``
only for a trial that ended without the scheduler stopping it. Its ASHA says ``STOP`` at
``max_t`` too, so a trial that runs to the end is removed, not completed, as in the Tuner.

The schedulers are built as Syne Tune's docs write them, from the space file: its
parameters in Syne Tune's config space (:func:`config_space`), ``metric`` and
``do_minimize`` from the objective, the replay's ``epoch`` as ``time_attr``, and
``random_seed`` the replay's seed. ``syne-asha`` and ``syne-bohb`` are
``syne_tune.optimizer.baselines``' ``ASHA`` and ``BOHB`` with ``max_t``,
``grace_period``, ``reduction_factor`` and ``brackets`` from the space's scheduler, so the
rungs are hpsearch's. ``syne-median`` is its ``MedianStoppingRule`` over ``RandomSearch``
(``grace_time`` the space's ``grace_period``, its other settings its defaults).
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from datetime import datetime
from typing import Any, Callable

from hpsearch.space.spec import CategoricalParam, FloatParam, IntParam, Spec

__all__ = ["SYNE_METHODS", "SyneTuneDriver", "config_space", "unavailable"]

#: What a Syne Tune method needs, for people.
_SYNE_MISSING = "needs Syne Tune, which is not installed: pip install syne-tune"


def unavailable(method: str) -> str | None:
    """What ``method`` (a :data:`~benchmarks.replay.methods.METHODS` name) needs that is
    not installed, as the end of a line that starts with its name; ``None`` when it can
    run here."""
    if method.split("@")[0] in SYNE_METHODS and importlib.util.find_spec("syne_tune") is None:
        return _SYNE_MISSING
    return None


def config_space(spec: Spec) -> dict[str, Any]:
    """``spec``'s searched parameters in Syne Tune's config space: a float is ``uniform``
    (``loguniform`` when ``log``), an int ``randint`` (``lograndint``), a parameter with a
    ``step`` ``finrange`` on the same grid, a categorical ``choice``. Syne Tune has no
    conditional parameters: one with a ``when`` is searched always, as Ray's OptunaSearch
    is given it in ``ray-stock``."""
    import syne_tune.config_space as cs

    out: dict[str, Any] = {}
    for p in spec.params:
        grid = isinstance(p, FloatParam) and p.step or isinstance(p, IntParam) and p.step > 1
        if isinstance(p, CategoricalParam):
            out[p.name] = cs.choice(list(p.choices))
        elif grid:  # a step never comes with log
            size = int((p.high - p.low) // p.step) + 1
            out[p.name] = cs.finrange(p.low, p.low + (size - 1) * p.step, size,
                                      cast_int=isinstance(p, IntParam))
        elif isinstance(p, IntParam):
            out[p.name] = (cs.lograndint if p.log else cs.randint)(p.low, p.high)
        elif isinstance(p, FloatParam):
            out[p.name] = (cs.loguniform if p.log else cs.uniform)(p.low, p.high)
        else:
            raise TypeError(f"unknown parameter type {type(p).__name__}")
    return out


class SyneTuneDriver:
    """A Syne Tune scheduler on ``spec``, made by ``make(config_space, spec)`` (one of
    :data:`SYNE_METHODS`), called in its ``Tuner``'s order (module docstring).

    Syne Tune 0.16's random search and BOHB's random configurations draw from numpy's
    global generator, not the one their ``random_seed`` seeds; the driver seeds it with
    the replay's seed as well, so that a replay is repeatable."""

    def __init__(self, spec: Spec, *, workers: int, make: Callable[[dict, Spec], Any],
                 method: str = "Syne Tune"):
        if importlib.util.find_spec("syne_tune") is None:
            raise ImportError(f"{method} {_SYNE_MISSING}")
        import numpy as np
        from syne_tune.optimizer.scheduler import SchedulerDecision

        # Its ASHA logs a warning as it builds its searcher (points_to_evaluate), and
        # statsmodels' KDE warns at each of BOHB's fits (in suggest): a replay would print
        # nothing else.
        logging.getLogger("syne_tune").setLevel(logging.ERROR)
        if spec.search.seed is not None:
            np.random.seed(spec.search.seed)
        self.scheduler = make(config_space(spec), spec)
        self.go_on = SchedulerDecision.CONTINUE
        self.trials: dict[str, Any] = {}
        self.removed: set[str] = set()

    def start(self, tune_id: str) -> tuple[str, dict] | None:
        from syne_tune.backend.trial_status import Trial

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (FutureWarning, RuntimeWarning))
            suggestion = self.scheduler.suggest()
        if suggestion is None:
            return None
        trial = Trial(trial_id=len(self.trials), config=dict(suggestion.config),
                      creation_time=datetime.now())
        self.trials[tune_id] = trial
        self.scheduler.on_trial_add(trial=trial)
        return tune_id, dict(suggestion.config)

    def report(self, key: str, result: dict) -> bool:
        trial = self.trials[key]
        if self.scheduler.on_trial_result(trial=trial, result=result) == self.go_on:
            return False
        self.scheduler.on_trial_remove(trial=trial)
        self.removed.add(key)
        return True

    def end(self, key: str, result: dict) -> None:
        if key not in self.removed:  # ran out of reports: the Tuner says it completed
            self.scheduler.on_trial_complete(self.trials[key], result)


def _common(spec: Spec) -> dict[str, Any]:
    return {"do_minimize": spec.objective.mode == "min", "random_seed": spec.search.seed}


def _baseline(name: str) -> Callable[[dict, Spec], Any]:
    """``syne_tune.optimizer.baselines.<name>``, a multi-fidelity one, with the space's
    rungs."""
    def make(space: dict, spec: Spec) -> Any:
        from syne_tune.optimizer import baselines

        s = spec.scheduler
        return getattr(baselines, name)(
            space, metric=spec.objective.metric, time_attr=s.result_key, max_t=s.max_t,
            grace_period=s.grace_period, reduction_factor=s.reduction_factor,
            brackets=s.brackets, **_common(spec))
    return make


def _median(space: dict, spec: Spec) -> Any:
    """``MedianStoppingRule`` over ``RandomSearch``, from ``grace_period`` on."""
    from syne_tune.optimizer.baselines import RandomSearch
    from syne_tune.optimizer.schedulers import MedianStoppingRule

    return MedianStoppingRule(RandomSearch(space, metrics=[spec.objective.metric],
                                           **_common(spec)),
                              time_attr=spec.scheduler.result_key, metric=spec.objective.metric,
                              grace_time=spec.scheduler.grace_period, **_common(spec))


def _syne(method: str, make: Callable[[dict, Spec], Any]) -> Callable[..., SyneTuneDriver]:
    return lambda spec, *, workers: SyneTuneDriver(spec, workers=workers, make=make,
                                                   method=method)


#: ``name -> (one line for people, the driver)``: Syne Tune's schedulers that fit a replay
#: (they stop trials on a time attribute, with no pause and resume), each with its
#: defaults. Its ``ASHABORE`` and ``ASHACQR`` fit too but refit a model at every suggestion
#: (10 to 50 times BOHB's time; benchmarks/README.md), and its median stopping rule around
#: ASHA fails (it passes neither ``on_trial_add`` nor ``on_trial_remove`` on).
SYNE_METHODS: dict[str, tuple[str, Callable[..., SyneTuneDriver]]] = {
    "syne-asha": ("Syne Tune stock: ASHA (random search + successive halving)",
                  _syne("syne-asha", _baseline("ASHA"))),
    "syne-bohb": ("Syne Tune stock: BOHB (KDE searcher + ASHA)",
                  _syne("syne-bohb", _baseline("BOHB"))),
    "syne-median": ("Syne Tune stock: random search + median stopping rule",
                    _syne("syne-median", _median)),
}
