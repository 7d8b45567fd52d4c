"""A spec's searched parameters as Optuna sees them: define-by-run and distributions.

The search space is given to Optuna *define-by-run*: :func:`define_by_run` returns a
callable that suggests every searched parameter in file order, and a conditional one only
when its condition holds. Fixed values are not suggested; :meth:`Spec.trial_config` adds
them to what Optuna samples. :func:`distributions` and :func:`inside` say the same space
as data, for trials added to a study by hand (warm start).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hpsearch.space.spec import CategoricalParam, FloatParam, IntParam, Param, Spec

if TYPE_CHECKING:
    import optuna

__all__ = ["define_by_run", "distributions", "inside"]


class _DefineByRun:
    """Suggests a spec's parameters on an Optuna trial."""

    def __init__(self, params: tuple[Param, ...]):
        self.params = params

    def __call__(self, trial: "optuna.Trial") -> dict[str, Any]:
        sampled: dict[str, Any] = {}
        for param in self.params:
            if param.when is None or param.when.holds(sampled):
                sampled[param.name] = _suggest(trial, param)
        return sampled

    def __repr__(self) -> str:
        return f"define_by_run({', '.join(p.name for p in self.params)})"


def _suggest(trial: "optuna.Trial", param: Param) -> Any:
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
        A callable ``f(trial) -> dict`` that suggests each searched parameter in file
        order (``low`` and ``high`` inclusive, ``log`` and ``step`` as written) and returns
        the sampled values. Fixed values are not included.

    Example:
        >>> import optuna
        >>> from hpsearch.space import parse_space
        >>> spec = parse_space({"name": "demo", "trainable": "digits",
        ...                     "objective": {"metric": "val_loss", "mode": "min"},
        ...                     "params": {"lr": {"type": "float", "low": 1e-4, "high": 0.1,
        ...                                       "log": True},
        ...                                "precision": {"type": "categorical",
        ...                                              "choices": ["fp32", "bf16"]},
        ...                                "batch_size": 64}})
        >>> study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        >>> define_by_run(spec)(study.ask())  # batch_size is fixed: not suggested
        {'lr': 0.004430375245218269, 'precision': 'fp32'}
    """
    return _DefineByRun(tuple(spec.params))


def distributions(spec: Spec) -> dict[str, Any]:
    """The Optuna distribution of every searched parameter, as :func:`define_by_run`
    suggests it."""
    import optuna.distributions as d

    out: dict[str, Any] = {}
    for p in spec.params:
        if isinstance(p, FloatParam):
            out[p.name] = d.FloatDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, IntParam):
            out[p.name] = d.IntDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, CategoricalParam):
            out[p.name] = d.CategoricalDistribution(list(p.choices))
    return out


def inside(param: Param, value: Any) -> bool:
    """Whether ``value`` is one that :func:`define_by_run` could suggest for ``param``:
    within ``[low, high]`` and on its ``step`` grid, or one of its choices.

    Example:
        >>> p = IntParam("warmup_steps", 0, 400, step=50)
        >>> inside(p, 150), inside(p, 160), inside(p, 450)
        (True, False, False)
    """
    if isinstance(param, CategoricalParam):
        return value in param.choices
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    if not math.isfinite(number) or not param.low <= number <= param.high:
        return False
    if isinstance(param, IntParam):
        step = param.step or 1
        return number == int(number) and (int(number) - param.low) % step == 0
    if param.step:
        k = (number - param.low) / param.step
        return abs(k - round(k)) < 1e-8
    return True
