"""The table of recorded learning curves, and the surrogate that answers a configuration.

A table (``benchmarks/record_curves.py``) holds every evaluation of a sample of a space's
configurations, each trained with several seeds. Here it becomes:

* **curves**: ``values[(config, seed)]``, the objective at epochs 1, 2, ... of one run;
* **times**: ``times[config]``, the seconds from the start of a run to each evaluation:
  the time is the configuration's, and the spread between its seeds the machine's noise,
  so the first evaluation is the fastest seed's (a process's first run of a precision
  pays one-off warm-ups) and each later one adds the median time between evaluations;
* **time(R)**: the median time of a full run of the space's default precision (``fp32``
  where ``precision`` is searched), the unit every budget is counted in.

:class:`Surrogate` answers a configuration the sampler proposes, which lies between the
recorded ones, with its nearest recorded neighbour: the same categorical values (precision),
the closest point in the numeric parameters scaled to ``[0, 1]`` (log scale where the space
searches on one), each parameter's distance weighted by how much it matters. The weights
are learned from the table (:func:`fit_weights`): on charlm, ``weight_decay`` and the
fp16 loss scale barely move the final loss, and counting them like ``lr`` tripled the
error. It never invents a value: every value a replay sees was measured, so the regret
against the table's best is never negative. :func:`surrogate_error` measures what that
costs on held-out configurations (each answered by its nearest *other* neighbour).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

__all__ = ["EXTRA", "CurveTable", "Surrogate", "fit_weights", "surrogate_error"]

#: The weights :func:`fit_weights` tries for each numeric parameter.
WEIGHT_GRID = (0.0, 0.1, 0.3, 1.0)

#: Metrics besides the objective that a table's runs carry and a replay reports.
EXTRA = ("samples_per_s", "train_loss")


@dataclass
class CurveTable:
    """A recorded curve table (see the module docstring).

    Attributes:
        path: Where it was read from.
        workload: The trainable recorded (``digits``, ``charlm``).
        names: The searched parameters the table varies.
        params: ``{config: {name: value}}``.
        values: ``{(config, seed): [objective at epoch 1, 2, ...]}``.
        times: ``{config: [seconds to epoch 1, 2, ...]}``.
        seeds: ``{config: [seeds recorded]}``.
        time_r: Seconds of one full run at the default precision.
        mode: ``min`` or ``max``.
        extra: ``{(config, seed): {metric: [value at epoch 1, 2, ...]}}`` of the other
            metrics recorded (:data:`EXTRA`), which a replay reports too (a second
            objective, a constraint).
    """

    path: Path
    workload: str
    names: tuple[str, ...]
    params: dict[int, dict[str, Any]]
    values: dict[tuple[int, int], list[float]]
    times: dict[int, list[float]]
    seeds: dict[int, list[int]]
    time_r: float
    mode: str = "min"
    extra: dict[tuple[int, int], dict[str, list[float]]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path, *, names: tuple[str, ...], mode: str = "min",
             max_t: int | None = None) -> "CurveTable":
        """Read ``path``; ``names`` are the space's searched parameters (those the table
        lacks are ignored), ``max_t`` cuts every curve there."""
        import pandas as pd

        frame = pd.read_parquet(path).sort_values(["config_id", "seed", "epoch"])
        if max_t is not None:
            frame = frame[frame["epoch"] <= max_t]
        names = tuple(n for n in names if n in frame.columns)
        params, values, seeds, per_seed_times, extra = {}, {}, {}, {}, {}
        for (config, seed), run in frame.groupby(["config_id", "seed"], sort=True):
            config, seed = int(config), int(seed)
            params.setdefault(config, {n: _plain(run[n].iloc[0]) for n in names})
            values[(config, seed)] = [float(v) for v in run["value"]]
            extra[(config, seed)] = {m: [float(v) for v in run[m]] for m in EXTRA
                                     if m in run.columns}
            seeds.setdefault(config, []).append(seed)
            per_seed_times.setdefault(config, []).append(list(run["elapsed_s"]))
        times = {c: _median_times(ts) for c, ts in per_seed_times.items()}
        full = max(len(v) for v in values.values())
        default = [c for c, p in params.items() if p.get("precision", "fp32") == "fp32"
                   and len(times[c]) == full] or [c for c in params if len(times[c]) == full]
        time_r = statistics.median(times[c][-1] for c in default)
        return cls(Path(path), str(frame["workload"].iloc[0]), names, params, values, times,
                   seeds, time_r, mode, extra)

    @property
    def sign(self) -> float:
        return 1.0 if self.mode == "min" else -1.0

    def best(self) -> float:
        """The best value any recorded run reached at any evaluation."""
        found = [v for vs in self.values.values() for v in vs if math.isfinite(v)]
        return min(found) if self.mode == "min" else max(found)

    def mean_curve(self, config: int) -> list[float]:
        """The mean over ``config``'s seeds of its value at each evaluation (NaN where a
        seed has none): what the configuration is worth, free of one run's luck."""
        runs = [self.values[(config, s)] for s in self.seeds[config]]
        out = []
        for i in range(max(map(len, runs))):
            at = [r[i] for r in runs if len(r) > i and math.isfinite(r[i])]
            out.append(statistics.fmean(at) if at else math.nan)
        return out

    def mean_final(self, config: int, metric: str | None = None) -> float:
        """The mean over ``config``'s seeds of its last value of ``metric`` (the objective
        when ``None``), NaN when no seed has a finite one."""
        runs = [self.values[(config, s)] if metric is None else
                self.extra[(config, s)].get(metric, []) for s in self.seeds[config]]
        finals = [r[-1] for r in runs if r and math.isfinite(r[-1])]
        return statistics.fmean(finals) if finals else math.nan

    def best_mean(self) -> float:
        """The best value of any configuration's mean curve (:meth:`mean_curve`)."""
        found = [v for c in self.params for v in self.mean_curve(c) if math.isfinite(v)]
        return min(found) if self.mode == "min" else max(found)

    def final_means(self) -> dict[int, float]:
        """``{config: mean over seeds of its last value}``, for the configurations that ran
        to the end with a finite value on every seed."""
        full = max(len(v) for v in self.values.values())
        out = {}
        for config, seeds in self.seeds.items():
            finals = [self.values[(config, s)][-1] for s in seeds
                      if len(self.values[(config, s)]) == full]
            if len(finals) == len(seeds) and all(math.isfinite(v) for v in finals):
                out[config] = statistics.fmean(finals)
        return out

    def target(self, quantile: float = 0.02) -> float:
        """The value a search should reach: the ``quantile`` of the configurations' mean
        final values from the good end (0.02: as good as the top 2% of the sample)."""
        ordered = sorted(self.final_means().values(), key=lambda v: self.sign * v)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _median_times(runs: list[list[float]]) -> list[float]:
    """A configuration's time to each evaluation from its runs' times: the fastest run's
    first evaluation (a process's first run of a precision pays one-off warm-ups, up to
    1.4 s on a 0.02 s epoch of digits), then the median time between evaluations."""
    longest = max(map(len, runs))
    out = [float(min(r[0] for r in runs))]
    for i in range(1, longest):
        gaps = [r[i] - r[i - 1] for r in runs if len(r) > i]
        out.append(out[-1] + float(statistics.median(gaps)))
    return out


class Surrogate:
    """The nearest recorded configuration to a proposed one (module docstring).

    Args:
        table: The curve table.
        distributions: ``{name: optuna distribution}`` of the space (its ranges and log
            scales; :func:`hpsearch.driver.search.space.distributions`).
        weights: One per numeric parameter (:attr:`numeric`), multiplying its squared
            distance; learned from the table (:func:`fit_weights`) when not given.
    """

    def __init__(self, table: CurveTable, distributions: Mapping[str, Any],
                 weights: tuple[float, ...] | None = None):
        self.table = table
        self.configs = sorted(table.params)
        self.numeric, self.categorical, scales = [], [], []
        for name in table.names:
            dist = distributions[name]
            if hasattr(dist, "choices"):
                self.categorical.append(name)
            else:
                self.numeric.append(name)
                scales.append((dist.low, dist.high, bool(getattr(dist, "log", False))))
        self.scales = scales
        self.points = np.array([[self._scaled(table.params[c][n], s)
                                 for n, s in zip(self.numeric, scales)] for c in self.configs]
                               ).reshape(len(self.configs), len(self.numeric))
        self.labels = [tuple(table.params[c][n] for n in self.categorical) for c in self.configs]
        self.weights = np.array(weights if weights is not None else fit_weights(table, self),
                                dtype=float)

    @staticmethod
    def _scaled(value: Any, scale: tuple[float, float, bool]) -> float:
        """``value`` on ``[0, 1]``; 0 for a conditional parameter that is not set (NaN or
        absent), so that configurations without it are compared on the others."""
        low, high, log = scale
        if value is None or value != value:
            return 0.0
        value = float(value)
        if log:
            return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
        return (value - low) / (high - low) if high > low else 0.0

    def nearest(self, params: Mapping[str, Any], *, exclude: int | None = None) -> int:
        """The recorded configuration closest to ``params`` (same categorical values where
        any recorded one has them)."""
        label = tuple(params.get(n) for n in self.categorical)
        point = np.array([self._scaled(params.get(n), s)
                          for n, s in zip(self.numeric, self.scales)])
        distance = ((self.points - point) ** 2) @ self.weights
        same = np.array([lab == label for lab in self.labels])
        if same.any():
            distance = np.where(same, distance, np.inf)
        if exclude is not None:
            distance[self.configs.index(exclude)] = np.inf
        return self.configs[int(np.argmin(distance))]


def fit_weights(table: CurveTable, surrogate: Surrogate,
                grid: tuple[float, ...] = WEIGHT_GRID) -> tuple[float, ...]:
    """The weights, one per numeric parameter of ``surrogate``, from ``grid`` (not all 0),
    whose nearest *other* neighbours answer the table's configurations with the least mean
    error over their whole mean curves (ASHA judges early epochs, not only the last): a
    metric learned by leave-one-out, the small model the surrogate is. Ties go to the
    first in the grid's order."""
    import itertools

    finals = table.final_means()
    rows = [surrogate.configs.index(c) for c in finals]
    curves = np.array([table.mean_curve(surrogate.configs[i]) for i in rows])
    points = surrogate.points[rows]
    square = (points[:, None, :] - points[None, :, :]) ** 2  # (n, n, parameters)
    labels = [surrogate.labels[i] for i in rows]
    apart = np.array([[a != b for b in labels] for a in labels]) | np.eye(len(rows), dtype=bool)
    best, best_error = tuple(1.0 for _ in surrogate.numeric), math.inf
    for weights in itertools.product(grid, repeat=len(surrogate.numeric)):
        if not any(weights):
            continue
        distance = np.where(apart, np.inf, square @ np.array(weights))
        error = float(np.nanmean(np.abs(curves[distance.argmin(axis=1)] - curves)))
        if error < best_error - 1e-12:
            best, best_error = weights, error
    return best


def surrogate_error(table: CurveTable, surrogate: Surrogate) -> dict[str, float]:
    """The surrogate's error on held-out configurations: each configuration that ran to the
    end is answered by its nearest *other* recorded configuration, and the answer's mean
    final value is compared with the configuration's own.

    Returns ``mae`` and ``median_ae`` (absolute error of the mean final value), ``rank_rho``
    (Spearman correlation of the answers with the truth: how well the surrogate keeps the
    order a search relies on), ``seed_sd`` (the mean standard deviation between a
    configuration's seeds: the noise floor no surrogate beats), ``spread_sd`` (the standard
    deviation between configurations: what a surrogate that knew nothing would miss by) and
    ``n`` (configurations held out).
    """
    finals = table.final_means()
    truth, answer = [], []
    for config, value in finals.items():
        other = surrogate.nearest(table.params[config], exclude=config)
        if other in finals:
            truth.append(value)
            answer.append(finals[other])
    errors = [abs(a - t) for a, t in zip(answer, truth)]
    seed_sds = []
    full = max(len(v) for v in table.values.values())
    for config, seeds in table.seeds.items():
        finals_c = [table.values[(config, s)][-1] for s in seeds
                    if len(table.values[(config, s)]) == full]
        if len(finals_c) > 1 and all(math.isfinite(v) for v in finals_c):
            seed_sds.append(statistics.stdev(finals_c))
    return {"n": len(truth), "mae": statistics.fmean(errors), "median_ae": statistics.median(errors),
            "rank_rho": _spearman(truth, answer),
            "seed_sd": statistics.fmean(seed_sds) if seed_sds else math.nan,
            "spread_sd": statistics.stdev(truth)}


def _spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(xs: list[float]) -> np.ndarray:
    order = np.argsort(xs, kind="stable")
    ranks = np.empty(len(xs))
    ranks[order] = np.arange(len(xs))
    return ranks
