"""The validated, frozen search-space spec.

This is the contract between the space file and everything downstream (translation to
Tune/Optuna, the sweep driver, the training harness). It is plain data: no Ray, no torch.
Build one with :func:`hpsearch.load_space`; never construct it from unvalidated input.
"""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

from hpsearch.space._param_types import (CategoricalParam, Condition, FloatParam, IntParam,
                                         Param)

__all__ = ["TRIAL_COLUMNS", "Budget", "CategoricalParam", "Checkpoints", "Command", "Condition",
           "Constraint", "FloatParam", "IntParam", "MlflowTrack", "Objective", "Param",
           "Resources", "Scheduler", "Search", "Spec", "Track", "Trials"]

#: Columns of ``trials.parquet`` besides the parameters; no parameter may take these names.
TRIAL_COLUMNS = (
    "trial_id", "status", "final_value", "best_value", "best_step", "best_epoch", "steps",
    "epochs", "wall_s", "worker_s", "gpu_s", "precision_used", "checkpoint", "error",
    "started_at", "ended_at", "startup_s", "optuna_trial",
)


@dataclass(frozen=True)
class Objective:
    """The metric a sweep optimises and its direction. Every min/max decision in hpsearch
    goes through these methods."""

    metric: str
    mode: Literal["min", "max"]

    @property
    def sign(self) -> int:
        """``+1`` for min, ``-1`` for max: ``sign * value`` sorts the best first."""
        return 1 if self.mode == "min" else -1

    @property
    def worst(self) -> float:
        """The worst possible value: ``inf`` for min, ``-inf`` for max."""
        return math.inf * self.sign

    def score(self, value: Any) -> float:
        """``sign * value`` for a finite number, else ``inf``: ascending sorts best first."""
        try:
            value = float(value)
        except (TypeError, ValueError):
            return math.inf
        return self.sign * value if math.isfinite(value) else math.inf

    def better(self, value: Any, than: Any) -> bool:
        """Whether ``value`` is finite and strictly better than ``than`` (``None``: any)."""
        if not math.isfinite(self.score(value)):
            return False
        return than is None or self.score(value) < self.score(than)

    def best(self, values: Iterable[Any]) -> Any:
        """The best finite value of ``values``, or ``None``."""
        found = [v for v in values if math.isfinite(self.score(v))]
        return min(found, key=self.score) if found else None


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether score vector ``a`` (higher is better everywhere) is at least as good as
    ``b`` everywhere and better somewhere.

    Example:
        >>> dominates((2, 1), (1, 1)), dominates((2, 0), (1, 1)), dominates((1, 1), (1, 1))
        (True, False, False)
    """
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def pareto_front(values: Sequence[Sequence[Any]], objectives: Sequence[Objective]) -> list[int]:
    """Indices of the ``values`` (one value per objective each) that no other dominates;
    a vector with a value that is not a finite number is never on the front."""
    scores = [[-o.score(v) for o, v in zip(objectives, row)] for row in values]
    finite = [i for i, s in enumerate(scores) if all(math.isfinite(x) for x in s)]
    return [i for i in finite if not any(dominates(scores[j], scores[i]) for j in finite)]


@dataclass(frozen=True)
class Constraint:
    """A bound a feasible trial's metric keeps (``constraints`` in the space file): at least
    ``min``, at most ``max``, or both. Its :meth:`violation` is what Optuna's samplers take
    (``constraints_func``): zero or less when the bound holds, the amount it is broken by
    otherwise."""

    metric: str
    min: float | None = None
    max: float | None = None

    def violation(self, value: Any) -> float:
        """How far ``value`` breaks the bound (``<= 0``: it holds; ``inf``: not a number)."""
        try:
            value = float(value)
        except (TypeError, ValueError):
            return math.inf
        if not math.isfinite(value):
            return math.inf
        return max(-math.inf if self.min is None else self.min - value,
                   -math.inf if self.max is None else value - self.max)

    def describe(self) -> str:
        """``val_accuracy >= 0.5``, ``peak_mem_mb <= 70000``, ``0 <= x <= 1``."""
        if self.min is not None and self.max is not None:
            return f"{self.min:g} <= {self.metric} <= {self.max:g}"
        return (f"{self.metric} >= {self.min:g}" if self.min is not None
                else f"{self.metric} <= {self.max:g}")


@dataclass(frozen=True)
class Search:
    """How Optuna proposes configurations (``docs/space-format.md``, ``search``).

    ``qmc`` (the default): the first ``n_startup_trials`` from a scrambled Sobol sequence,
    then TPE. ``tpe``: TPE after ``n_startup_trials`` random ones. ``random``. ``gp``:
    Optuna's Gaussian-process sampler after ``n_startup_trials`` random ones. ``nsga2``:
    Optuna's NSGA-II with a population of ``n_startup_trials`` (at least 2).
    """

    algorithm: Literal["tpe", "random", "gp", "qmc", "nsga2"] = "qmc"
    seed: int | None = 0
    n_startup_trials: int = 10
    #: Earlier sweeps (names in the same storage, or ``latest``) whose trials seed the
    #: study before the first suggestion (``docs/nightly.md``).
    warm_start: tuple[str, ...] = ()
    #: How many of their best configurations run first.
    warm_start_best: int = 3


@dataclass(frozen=True)
class Scheduler:
    """Early stopping. ``type: fifo`` runs every trial to ``max_t``."""

    type: Literal["asha", "fifo"] = "asha"
    #: PASHA (asha, one bracket): trials end at the second rung at first, and the end
    #: grows a rung at a time, up to ``max_t``, while the top two rungs rank trials
    #: differently (:mod:`hpsearch.driver.search.pasha`).
    progressive: bool = False
    time_attr: Literal["epoch", "step", "time"] = "epoch"
    max_t: int = 10
    grace_period: int = 1
    reduction_factor: int = 3
    #: Asynchronous Hyperband brackets (asha); 1 is plain ASHA. A space file that leaves
    #: it out gets :func:`default_brackets`.
    brackets: int = 1

    @property
    def result_key(self) -> str:
        """The report key that holds ``time_attr``: ``epoch``, ``step``, or for ``time``
        Tune's ``time_total_s`` (the trial's own seconds since it started)."""
        return "time_total_s" if self.time_attr == "time" else self.time_attr

    @property
    def unit(self) -> str:
        """``time_attr``'s unit, plural, for people: epochs, steps or seconds."""
        return {"epoch": "epochs", "step": "steps", "time": "seconds"}[self.time_attr]

    @property
    def budget_key(self) -> str | None:
        """The trial config key that ``max_t`` sets (``epochs`` or ``max_steps``); ``None``
        for ``time``, where a trial's length comes from its params and ``max_t`` seconds
        only cap it."""
        return {"epoch": "epochs", "step": "max_steps"}.get(self.time_attr)

    def rungs(self) -> tuple[int, ...]:
        """Milestones at which ASHA compares trials (``grace_period * rf**k < max_t``)."""
        out, t = [], self.grace_period
        while self.type == "asha" and t < self.max_t:
            out.append(t)
            t *= self.reduction_factor
        return tuple(out)


def default_brackets(scheduler: Scheduler, *, several: bool = False) -> int:
    """``scheduler.brackets`` where the space leaves it out: 2 (asynchronous Hyperband)
    for ASHA with one objective and at least two rungs below ``max_t``, else 1.

    Two brackets found a configuration closer to the best than one did on each of the
    three recorded tables of the search-quality replay, and were never behind it with
    intervals apart from 5x to 50x time(R) (``benchmarks/README.md``, "Brackets").

    >>> default_brackets(Scheduler(max_t=9)), default_brackets(Scheduler(max_t=3))
    (2, 1)
    >>> default_brackets(Scheduler(max_t=9), several=True)
    1
    >>> default_brackets(Scheduler(max_t=9, progressive=True))  # PASHA is one bracket
    1
    """
    return 2 if (scheduler.type == "asha" and len(scheduler.rungs()) >= 2 and not several
                 and not scheduler.progressive) else 1


def with_default_brackets(raw: dict[str, Any], scheduler: Scheduler, *,
                          several: bool) -> tuple[dict[str, Any], Scheduler]:
    """``raw`` (a space's mapping, changed in place) and ``scheduler`` with
    :func:`default_brackets` where the space leaves ``brackets`` out. ``raw`` gets them
    too: a sweep's copy of its space holds them, so a resume runs the brackets the sweep
    was made with, whatever a later release's default."""
    section = raw.get("scheduler") or {}
    if scheduler.type != "asha" or "brackets" in section:
        return raw, scheduler
    brackets = default_brackets(scheduler, several=several)
    raw["scheduler"] = {**section, "brackets": brackets}
    return raw, dataclasses.replace(scheduler, brackets=brackets)


@dataclass(frozen=True)
class Trials:
    num: int = 16
    max_concurrent: int | Literal["auto"] = "auto"
    max_failures: int = 2
    #: A command trial that reports nothing for this long is stopped and fails as hung
    #: (``None``: running trials gone quiet are only named on the console).
    hung_after_s: float | None = None


@dataclass(frozen=True)
class Resources:
    """What each trial holds. ``share`` weighs this sweep against others on a shared
    cluster (twice the share, twice the trial slots while both run). ``warm_workers``:
    multi-worker harness trials reuse their worker group, trial after trial (``false``:
    a fresh Ray Train run per trial)."""

    workers: int = 1
    use_gpu: bool = False
    cpus_per_worker: float = 1
    gpus_per_worker: float = 0
    share: float = 1.0
    warm_workers: bool = True
    #: Seconds a collective of a multi-worker Ray Train trial may wait before its process
    #: group fails (Ray's default is 1800: a broken interface held the GPUs for hours).
    collective_timeout_s: float = 600.0
    #: Seconds a multi-worker trial's first collective may take (the guard that fails a
    #: group whose ranks cannot reach each other in one line, cold or warm).
    first_collective_timeout_s: float = 60.0

    def per_worker(self) -> dict[str, float]:
        """Resources one worker holds."""
        out = {"CPU": self.cpus_per_worker}
        if self.use_gpu:
            out["GPU"] = self.gpus_per_worker or 1
        return out

    def per_trial(self) -> dict[str, float]:
        """Resources one trial's workers need together."""
        return {k: v * self.workers for k, v in self.per_worker().items()}


@dataclass(frozen=True)
class Budget:
    """When a sweep must end: after ``time_s`` seconds, at ``deadline``, whichever is first.

    ``deadline`` is kept as written (``"07:00"``, ``"2026-12-01T07:00"``) and resolved to a
    moment when the sweep starts (:func:`hpsearch.space.duration.parse_deadline`).
    """

    time_s: float | None = None
    deadline: str | None = None


@dataclass(frozen=True)
class Checkpoints:
    keep: int = 2
    keep_best_trials: int = 3


@dataclass(frozen=True)
class MlflowTrack:
    """``track.mlflow`` (``docs/tracking.md``); ``None`` means the default."""

    tracking_uri: str | None = None  # default: $MLFLOW_TRACKING_URI as the sweep starts
    experiment: str | None = None  # default: the sweep's name


@dataclass(frozen=True)
class Track:
    """``track:``: where every trial is also written, live, from the driver."""

    mlflow: MlflowTrack | None = None
    tensorboard: bool = False  # event files under <sweep>/tensorboard/

    @property
    def any(self) -> bool:
        return self.mlflow is not None or self.tensorboard


@dataclass(frozen=True)
class Command:
    """A command trainable: a script run once per worker, its metrics read from its output
    (``docs/space-format.md``, "Command trainables").

    Attributes:
        argv: The command's words as written, placeholders (``{lr}``, ``{trial_dir}``) kept.
        metrics: Regular expressions with named groups; empty: ``key=value`` or JSON lines.
        metrics_from: Files under ``{trial_dir}`` read for reports as they grow
            (:class:`~hpsearch.command.sources.MetricsFile`); then the output is not.
        resume_if_exists: A file under ``{trial_dir}``, or a glob (``checkpoint-*``): when a
            restarted trial finds it, ``resume_args`` are appended to the command, with
            ``{resume_from}`` the newest match.
        cwd: Where the command runs, absolute (the space file's folder by default).
        cwd_in_job: ``cwd`` relative to the driver's working directory, when inside it: on a
            node where ``cwd`` does not exist (``hpsearch submit`` unpacks the working
            directory per node), the command runs there under the process's own one.
        env: Extra environment variables.
        stop_grace_s: Seconds between SIGTERM and SIGKILL when a trial is stopped.
        launcher: ``torchrun``: each process gets the variables torchrun sets (``RANK``,
            ``WORLD_SIZE``, ``MASTER_ADDR``...); ``plain``: none of them, as
            ``python train.py`` run by hand. ``None`` (the default): ``torchrun`` when a
            trial has several workers, ``plain`` at one.
    """

    argv: tuple[str, ...]
    metrics: tuple[str, ...] = ()
    metrics_from: tuple[Any, ...] = ()
    resume_if_exists: str | None = None
    resume_args: tuple[str, ...] = ()
    cwd: str = "."
    cwd_in_job: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    stop_grace_s: float = 10.0
    launcher: str | None = None

    def torchrun_at(self, workers: int) -> bool:
        """Whether a trial of ``workers`` workers gets torchrun's variables."""
        return self.launcher == "torchrun" or (self.launcher is None and workers > 1)

    def __str__(self) -> str:
        import shlex

        return " ".join(w if w and not any(c.isspace() or c in "'\"\\$`;&|<>" for c in w)
                        else shlex.quote(w) for w in self.argv)


@dataclass(frozen=True)
class Spec:
    """A validated search space. Field names mirror the YAML sections.

    Attributes:
        params: Searched parameters, in file order (conditions refer to earlier ones).
        fixed: Plain values from ``params`` that are passed to every trial unchanged.
        source: The file the spec came from (``None`` if built from a dict).
        raw: The YAML mapping after overrides, as run; written into the sweep directory.
        trainable: A reference (a built-in name or ``package.module:attribute``), or a
            :class:`Command`.
        objective: The objective, or the first of several: ASHA's time attribute, the
            trial table's ``final_value`` and ``best_value`` follow it.
        more_objectives: The objectives after the first (a study of several, #24).
        constraints: Bounds a feasible trial's last report keeps.
    """

    name: str
    trainable: str | Command
    objective: Objective
    params: tuple[Param, ...]
    fixed: Mapping[str, Any]
    search: Search = field(default_factory=Search)
    scheduler: Scheduler = field(default_factory=Scheduler)
    trials: Trials = field(default_factory=Trials)
    resources: Resources = field(default_factory=Resources)
    budget: Budget = field(default_factory=Budget)
    storage: str = "./runs"
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    track: Track = field(default_factory=Track)
    source: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    more_objectives: tuple[Objective, ...] = ()
    constraints: tuple[Constraint, ...] = ()

    @property
    def objectives(self) -> tuple[Objective, ...]:
        """Every objective, the first one first."""
        return (self.objective, *self.more_objectives)

    @property
    def several_objectives(self) -> bool:
        """Whether the study has more than one objective (a Pareto front, not a best)."""
        return bool(self.more_objectives)

    @property
    def conditional(self) -> tuple[str, ...]:
        """The names of the parameters sampled only when their ``when`` holds."""
        return tuple(p.name for p in self.params if p.when is not None)

    @property
    def command(self) -> Command | None:
        """The command trainable, or ``None`` for a Python one."""
        return self.trainable if isinstance(self.trainable, Command) else None

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def default_config(self) -> dict[str, Any]:
        """The config ``hpsearch trial`` runs when nothing is set: midpoints / first choices."""
        config: dict[str, Any] = dict(self.fixed)
        for p in self.params:
            if p.when is None or p.when.holds(config):
                config[p.name] = p.midpoint()
        return config

    def upper_config(self) -> dict[str, Any]:
        """The config at the top of every searched range (the largest numeric choice of a
        categorical, else its first), as a trial gets it: the largest model the space can
        build, for the storage estimate (``hpsearch run --dry-run``)."""
        sampled: dict[str, Any] = {}
        for p in self.params:
            if isinstance(p, CategoricalParam):
                numbers = [c for c in p.choices if isinstance(c, (int, float))
                           and not isinstance(c, bool)]
                sampled[p.name] = max(numbers) if numbers else p.choices[0]
            else:
                sampled[p.name] = p.high
        return self.trial_config(sampled)

    def trial_config(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        """The full config a trial receives: fixed values, sampled values, and the budget
        in units of ``scheduler.time_attr`` (``epochs`` or ``max_steps``; for ``time`` the
        params give the length)."""
        config = {**self.fixed, **sampled}
        budget_key = self.scheduler.budget_key
        if budget_key is not None:
            config.setdefault(budget_key, self.scheduler.max_t)
        return config
