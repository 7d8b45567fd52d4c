"""DEHB (differential evolution + Hyperband) as a replay method, through its own ask/tell (#38).

DEHB is not a dependency of hpsearch: it is imported when the ``dehb`` method is built, and
a missing package is one line (:func:`unavailable`, and the ``ImportError`` the driver
raises); every other method runs without it. It is installed with hpsearch's ``bench``
extra and then ``pip install --no-deps dehb``: DEHB 0.1.2 pins ``numpy<2``, and a plain
``pip install dehb`` pairs numpy 1.26 with a pyarrow that needs numpy 2 (pyproject.toml).

:class:`DehbDriver` runs the package's ``DEHB`` optimizer as its ask/tell users run it with
several workers: each free worker calls ``ask()`` and gets a job, a configuration and a
*fidelity*; the worker trains that configuration to the fidelity, and the result is
``tell()``-ed back with its ``fitness`` (DEHB minimises: the objective, negated for
``max``) and its ``cost``. That is what ``DEHB.run()`` does with ``n_workers`` Dask
workers; the replay's 4 simulated workers stand in for Dask, so the optimizer is built
with ``n_workers=1`` (which only keeps it from starting a Dask cluster of its own: ask and
tell never look at it).

The fidelity is the space's ``scheduler.time_attr`` (epochs for both recorded spaces):
``min_fidelity`` is ``grace_period``, ``max_fidelity`` is ``max_t`` and ``eta`` is
``reduction_factor``. DEHB spaces its fidelities down from ``max_t`` by factors of
``eta`` (``max_t * eta**-k`` no lower than ``grace_period``): 1, 3 and 9 epochs on charlm,
but 2 and 6 on digits (``max_t: 6``), where it never judges a trial at epoch 1. A job is
one trial, run until its ``time_attr`` reaches the job's fidelity (the first report at or
past it, were a fidelity not a whole epoch); DEHB stops no trial itself, so
:meth:`DehbDriver.report` says stop there. Each job is a new trial trained from scratch:
when DEHB promotes a configuration to a higher fidelity, the replay charges the whole run
again, as DEHB's own ``run()`` does with an objective that does not resume from a
checkpoint of its own.

The space file's parameters become a ConfigSpace space (:func:`config_space`); DEHB's
other settings are its defaults (``mutation_factor`` 0.5, ``crossover_prob`` 0.5,
``rand1_bin``), its seed the replay's. DEHB logs to a file in ``output_path``: a
temporary folder per driver here, and it saves nothing else (``save_freq="end"``, which
only ``run()`` reaches).
"""

from __future__ import annotations

import importlib.util
import math
import tempfile
from typing import Any

from hpsearch.space.spec import CategoricalParam, FloatParam, IntParam, Spec

__all__ = ["DehbDriver", "config_space", "unavailable"]

#: What the ``dehb`` method needs, for people.
_MISSING = ("needs DEHB, which is not installed: pip install -e '.[bench]' && "
            "pip install --no-deps dehb (its numpy<2 pin would break pyarrow)")


def unavailable(method: str) -> str | None:
    """What ``method`` (a :data:`~benchmarks.replay.methods.METHODS` name) needs that is
    not installed, as the end of a line that starts with its name; ``None`` when it can
    run here."""
    if method.split("@")[0] == "dehb" and (importlib.util.find_spec("dehb") is None
                                           or importlib.util.find_spec("ConfigSpace") is None):
        return _MISSING
    return None


def config_space(spec: Spec, *, seed: int | None = None) -> Any:
    """``spec``'s searched parameters as a ``ConfigSpace.ConfigurationSpace``: a float is
    uniform (log-uniform with ``log``), an int a uniform integer (log with ``log``), a
    parameter with a ``step`` ordinal on its grid (DEHB gives each grid value an equal
    share of its [0, 1] axis), a categorical categorical; a ``when`` is a condition, so a
    conditional parameter is in a configuration only when its condition holds, as
    hpsearch's define-by-run space has it."""
    import ConfigSpace as CS

    cs = CS.ConfigurationSpace(seed=seed)
    for p in spec.params:
        if isinstance(p, CategoricalParam):
            hp = CS.CategoricalHyperparameter(p.name, list(p.choices))
        elif isinstance(p, IntParam) and p.step > 1:  # a step never comes with log
            hp = CS.OrdinalHyperparameter(p.name, list(range(p.low, p.high + 1, p.step)))
        elif isinstance(p, IntParam):
            hp = CS.UniformIntegerHyperparameter(p.name, p.low, p.high, log=p.log)
        elif isinstance(p, FloatParam) and p.step:
            size = round((p.high - p.low) / p.step) + 1
            hp = CS.OrdinalHyperparameter(p.name, [p.low + k * p.step for k in range(size)])
        elif isinstance(p, FloatParam):
            hp = CS.UniformFloatHyperparameter(p.name, p.low, p.high, log=p.log)
        else:
            raise TypeError(f"unknown parameter type {type(p).__name__}")
        cs.add(hp)
    for p in spec.params:
        if p.when is not None:
            child, parent, values = cs[p.name], cs[p.when.param], list(p.when.values)
            cs.add(CS.EqualsCondition(child, parent, values[0]) if len(values) == 1
                   else CS.InCondition(child, parent, values))
    return cs


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


class DehbDriver:
    """``DEHB(cs, min_fidelity=grace_period, max_fidelity=max_t, eta=reduction_factor,
    seed)`` through ``ask()`` and ``tell()``, one job a trial (module docstring)."""

    def __init__(self, spec: Spec, *, workers: int):
        try:
            from dehb import DEHB
        except ImportError:
            raise ImportError(f"dehb {_MISSING}") from None
        s = spec.scheduler
        self.metric, self.key = spec.objective.metric, s.result_key
        self.sign = 1.0 if spec.objective.mode == "min" else -1.0
        self._logs = tempfile.TemporaryDirectory(prefix="dehb-replay-")
        self.optimizer = DEHB(cs=config_space(spec, seed=spec.search.seed),
                              min_fidelity=s.grace_period, max_fidelity=s.max_t,
                              eta=s.reduction_factor, n_workers=1, seed=spec.search.seed,
                              output_path=self._logs.name, save_freq="end")
        self.jobs: dict[str, dict] = {}

    def start(self, tune_id: str) -> tuple[str, dict] | None:
        job = self.jobs[tune_id] = self.optimizer.ask()
        return tune_id, {k: _plain(v) for k, v in dict(job["config"]).items()}

    def report(self, key: str, result: dict) -> bool:
        """Stop once the trial has reached its job's fidelity: the job is done."""
        return result[self.key] >= self.jobs[key]["fidelity"]

    def end(self, key: str, result: dict) -> None:
        job, value = self.jobs.pop(key), result[self.metric]
        # A value that is not a number is the worst: DEHB keeps its slot as unevaluated.
        fitness = self.sign * value if math.isfinite(value) else math.inf
        self.optimizer.tell(job, {"fitness": fitness, "cost": result["time_total_s"]})
