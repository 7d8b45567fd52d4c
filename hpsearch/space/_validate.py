"""Raw mapping -> :class:`Spec`, reporting every problem at once.

Each section has a reader that returns its spec object or :data:`BAD`; all readers run
even when an earlier one failed, so one run of ``hpsearch validate`` lists every problem.
The parameters live in :mod:`._params`.
"""

from __future__ import annotations

import copy
import datetime
import os
import re
from typing import Any, Mapping

from hpsearch.errors import SpaceError, TrainableError
from hpsearch.space._command import check_command, read_command
from hpsearch.space._measures import read_constraints, read_objectives, read_track, several_fit
from hpsearch.space._params import read_params
from hpsearch.space._schema import BAD, Report, got, is_number, ok, show
from hpsearch.space._yaml import REJECTED
from hpsearch.space.duration import parse_deadline, parse_duration
from hpsearch.workloads.resolve import TrainableRef, check_reference, find_trainable
from hpsearch.space.spec import (Budget, Checkpoints, Command, Resources,
                                 Scheduler, Search, Spec, Trials, with_default_brackets)

__all__ = ["SECTIONS", "sort_issues", "storage_problem", "validate"]

#: Top-level sections, in the order the docs list them.
SECTIONS = (
    "name", "trainable", "objective", "constraints", "params", "search", "scheduler", "trials",
    "resources", "budget", "storage", "checkpoints", "track",
)
_EXAMPLES = {
    "objective": "{metric: val_loss, mode: min}",
    "params": "{lr: {type: float, low: 1.0e-4, high: 0.1, log: true}}",
    "search": "{algorithm: qmc, seed: 0}",
    "scheduler": "{type: asha, max_t: 12, grace_period: 1, reduction_factor: 3}",
    "trials": "{num: 32, max_concurrent: auto}",
    "resources": "{workers: 2, use_gpu: false}",
    "budget": "{time: 8h}",
    "checkpoints": "{keep: 2, keep_best_trials: 3}",
    "trainable": "charlm",
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SEED_LIMIT = 2**32  # numpy's RandomState, under Optuna's samplers, takes seeds below 2**32


def validate(raw: Any, *, report: Report, default_name: str, source: str | None,
             resolve_trainable: bool = True, harness: bool | None = None) -> Spec:
    """Build a :class:`Spec` from ``raw`` or raise :class:`SpaceError` with every issue.

    Args:
        raw: The mapping read from YAML (after overrides).
        report: Collects issues; may already hold some from reading the file.
        default_name: The sweep name when ``name`` is absent.
        source: The file the mapping came from, stored on the spec.
        resolve_trainable: Locate ``module:function`` trainables (never importing them).
        harness: Check values against the training harness's rules: ``None`` when the
            trainable's source shows it is a harness workload.
    """
    spec = _read_spec(raw, report, default_name, source, resolve_trainable, harness)
    if report.issues or spec is BAD:
        raise SpaceError(sort_issues(report.issues))
    return spec


def sort_issues(issues: list) -> list:
    """File-wide issues (no line) first, then in the order of the file."""
    return sorted(issues, key=lambda i: (i.line is not None, i.line or 0))


def _read_spec(raw: Any, report: Report, default_name: str, source: str | None,
               resolve_trainable: bool, harness: bool | None) -> Any:
    if raw is REJECTED:
        return BAD
    if raw is None:
        return report.add((), "empty", "the space is empty; it needs at least `trainable`, "
                          "`objective` and `params`")
    if not isinstance(raw, Mapping):
        return report.add((), "type", "expected a mapping of sections (name, trainable, "
                          f"objective, params, ...) at the top level {got(raw)}")
    report.reject_unknown_keys(raw, (), SECTIONS, what="section")
    scheduler = _read_scheduler(raw, report)
    trainable = _read_trainable(raw, report, resolve_trainable, source)
    objectives = read_objectives(raw, report)
    parts = dict(
        name=_read_name(raw, report, default_name),
        trainable=trainable.ref if isinstance(trainable, TrainableRef) else trainable,
        objective=objectives if objectives is BAD else objectives[0],
        more_objectives=objectives if objectives is BAD else objectives[1],
        constraints=read_constraints(raw, report),
        search=_read_search(raw, report),
        scheduler=scheduler,
        trials=_read_trials(raw, report),
        resources=_read_resources(raw, report),
        budget=_read_budget(raw, report),
        storage=_read_storage(raw, report),
        checkpoints=_read_checkpoints(raw, report),
        track=read_track(raw, report),
    )
    budget_key = None
    if scheduler is not BAD:
        budget_key = scheduler.budget_key
    contract = _harness_contract(trainable, harness)
    params = read_params(raw.get("params"), report, present="params" in raw,
                         budget_key=budget_key, rules=contract.KEYS if contract else None)
    if not ok(params, *parts.values()):
        return BAD
    searched, fixed = params
    raw, scheduler = with_default_brackets(copy.deepcopy(dict(raw)), scheduler,
                                           several=bool(parts["more_objectives"]))
    parts["scheduler"] = scheduler
    if isinstance(trainable, Command):
        check_command(trainable, report, params=searched, fixed=fixed,
                      objective=parts["objective"], scheduler=scheduler,
                      more=[o.metric for o in parts["more_objectives"]]
                      + [c.metric for c in parts["constraints"]],
                      workers=parts["resources"].workers)
        raw["trainable"] = {**raw["trainable"], "cwd": trainable.cwd}  # as resolved: a
        # resumed sweep reads its space from the sweep directory
    if contract is not None and parts["resources"].gpus_per_worker > 1:
        return report.add(("resources", "gpus_per_worker"), "conflict",
                          "hpsearch's training loop trains each worker on one GPU, so "
                          f"{show(parts['resources'].gpus_per_worker)} would hold GPUs it "
                          "never uses; set gpus_per_worker: 1 and workers: N for N GPUs a "
                          "trial")
    if (contract is not None and scheduler.time_attr == "time"
            and not {"epochs", "max_steps"} & ({p.name for p in searched} | set(fixed))):
        return report.add(("scheduler", "time_attr"), "conflict",
                          "`time` stops trials after max_t seconds, but the learning-rate "
                          "schedule needs each trial's length: set `epochs` or `max_steps` "
                          "in params (e.g. `epochs: 20`)")
    if parts["more_objectives"] and not several_fit(parts, scheduler, searched, fixed, report):
        return BAD
    spec = Spec(params=searched, fixed=fixed, source=source, raw=raw, **parts)
    if contract is not None and not report.issues:
        try:  # rules between keys (min_lr <= lr), on the config `hpsearch trial` would run
            contract.HarnessConfig.from_config(spec.trial_config(spec.default_config()))
        except ValueError as exc:
            return report.add(("params",), "harness", f"the training loop refuses the default "
                              f"config: {exc}")
    return spec


def _harness_contract(trainable: Any, harness: bool | None) -> Any:
    """The harness's config rules (:mod:`hpsearch.train.keys`) when ``trainable`` is a
    harness workload, as far as its source tells without running it; else ``None``."""
    if harness is None:
        harness = isinstance(trainable, TrainableRef) and trainable.kind == "harness"
    if not harness:
        return None
    from hpsearch.train import keys

    return keys


def _read_name(raw: Mapping, report: Report, default: str) -> Any:
    name = report.text(raw, (), "name", default=default)
    if name is BAD or name == default:
        return name
    if not _NAME.match(name) or len(name) > 100:
        return report.add(("name",), "name", "must be 1-100 letters, digits, `.`, `_` or `-`, "
                          f"starting with a letter or digit (it names the sweep's directory) "
                          f"(got {show(name)})")
    return name


def _read_trainable(raw: Mapping, report: Report, resolve: bool, source: str | None) -> Any:
    """The trainable reference, located (never imported) when ``resolve``: a
    :class:`TrainableRef` that knows whether it is a harness workload; or, for a mapping,
    a :class:`Command`."""
    if raw.get("trainable") is None:
        what = "is missing" if "trainable" not in raw else "is null"
        return report.add(("trainable",), "missing", f"required section {what}; add e.g. "
                          "`trainable: charlm` (a built-in), `trainable: mypkg.train:main` "
                          "or `trainable: {command: 'python train.py --lr={lr}'}`")
    if isinstance(raw["trainable"], Mapping):
        base = os.path.dirname(os.path.abspath(source)) if source else os.getcwd()
        return read_command(raw["trainable"], report, base_dir=base, resolve=resolve)
    ref = report.text(raw, (), "trainable")
    if ref is BAD:
        return BAD
    try:
        return find_trainable(ref) if resolve else TrainableRef(check_reference(ref), "unknown")
    except TrainableError as exc:
        return report.add(("trainable",), "trainable", str(exc))


def _section(raw: Mapping, report: Report, name: str, keys: tuple[str, ...], *,
             required: bool = False) -> tuple[tuple, Any]:
    """The top-level section ``name`` and its path, with the keys it has besides ``keys``
    reported; the section is :data:`BAD` when it is not a mapping (or, ``required``, is
    missing)."""
    path = (name,)
    section = report.section(raw, name, example=_EXAMPLES[name], required=required)
    if section is not BAD:
        report.reject_unknown_keys(section, path, keys)
    return path, section


def _read_search(raw: Mapping, report: Report) -> Any:
    path, section = _section(raw, report, "search", ("algorithm", "seed", "n_startup_trials",
                                                     "warm_start", "warm_start_best"))
    if section is BAD:
        return BAD
    algorithm = report.option(section, path, "algorithm",
                              ("qmc", "tpe", "random", "gp", "nsga2"),
                              default="qmc")
    seed: Any = 0
    if "seed" in section and section["seed"] is None:
        seed = None  # null asks for a fresh random seed each run
    else:
        seed = report.integer(section, path, "seed", default=0, minimum=0,
                              maximum=_SEED_LIMIT - 1)
    startup = report.integer(section, path, "n_startup_trials", default=10, minimum=0)
    warm_start = _read_warm_start(section.get("warm_start"), path + ("warm_start",), report)
    best = report.integer(section, path, "warm_start_best", default=3, minimum=0)
    if not ok(algorithm, seed, startup, warm_start, best):
        return BAD
    return Search(algorithm=algorithm, seed=seed, n_startup_trials=startup, warm_start=warm_start,
                  warm_start_best=best)


def _read_warm_start(value: Any, path: tuple, report: Report) -> Any:
    """``latest``, a sweep name, or a list of them."""
    def read_one(name: Any, here: tuple) -> Any:
        if not isinstance(name, str) or not (name == "latest" or _NAME.match(name)):
            return report.add(here, "name", "must be `latest` or the name of an earlier "
                              f"sweep in the same storage {got(name)}")
        return name

    names = report.listed(value, path, read_one)
    return BAD if names is BAD else tuple(dict.fromkeys(names))


def _read_scheduler(raw: Mapping, report: Report) -> Any:
    keys = ("type", "time_attr", "max_t", "grace_period", "reduction_factor", "brackets",
            "progressive")
    path, section = _section(raw, report, "scheduler", keys)
    if section is BAD:
        return BAD
    kind = report.option(section, path, "type", ("asha", "fifo"), default="asha")
    time_attr = report.option(section, path, "time_attr", ("epoch", "step", "time"),
                              default="epoch")
    max_t = report.integer(section, path, "max_t", default=10, minimum=1)
    grace = report.integer(section, path, "grace_period", default=1, minimum=1)
    factor = report.integer(section, path, "reduction_factor", default=3, minimum=2)
    if kind == "asha" and ok(max_t, grace) and grace > max_t:
        unit = {"epoch": " epochs", "step": " steps", "time": " seconds"}.get(time_attr, "")
        grace = report.add(path + ("grace_period",), "range",
                           f"must be <= max_t ({max_t}{unit}), the length of a full trial "
                           f"(got {grace})")
    brackets = report.integer(section, path, "brackets", default=1, minimum=1)
    most = ok(max_t, grace, factor) and max(1, len(Scheduler(
        max_t=max_t, grace_period=grace, reduction_factor=factor).rungs()))
    if kind == "asha" and most and ok(brackets) and brackets > most:
        brackets = report.add(path + ("brackets",), "range", f"must be <= {most}, the rungs below "
                              f"max_t ({max_t}), as bracket s starts at rung s (got {brackets})")
    progressive = report.flag(section, path, "progressive", default=False)
    if progressive is True and (kind != "asha" or ok(brackets) and brackets > 1):
        progressive = report.add(path + ("progressive",), "conflict", "PASHA is one bracket "
                                 "of ASHA: set type: asha and leave brackets out (got type "
                                 f"{kind}, brackets {brackets})")
    if not ok(kind, time_attr, max_t, grace, factor, brackets, progressive):
        return BAD
    return Scheduler(type=kind, progressive=progressive, time_attr=time_attr, max_t=max_t,
                     grace_period=grace, reduction_factor=factor, brackets=brackets)


def _read_trials(raw: Mapping, report: Report) -> Any:
    path, section = _section(raw, report, "trials", ("num", "max_concurrent", "max_failures",
                                                     "hung_after"))
    if section is BAD:
        return BAD
    num = report.integer(section, path, "num", default=16, minimum=1)
    failures = report.integer(section, path, "max_failures", default=2, minimum=0)
    concurrent = section.get("max_concurrent")
    if concurrent is None:
        concurrent = "auto"
    elif concurrent is REJECTED:
        concurrent = BAD
    elif isinstance(concurrent, str):
        if concurrent != "auto":
            hint = "; did you mean `auto`?" if concurrent.strip().lower() == "auto" else ""
            concurrent = report.add(path + ("max_concurrent",), "choice",
                                    f"must be `auto` or an integer >= 1 {got(concurrent)}{hint}")
    else:
        concurrent = report.check_integer(concurrent, path + ("max_concurrent",), minimum=1)
    hung = _read_duration(section.get("hung_after"), path, report, key="hung_after")
    if not ok(num, failures, concurrent, hung):
        return BAD
    return Trials(num=num, max_concurrent=concurrent, max_failures=failures, hung_after_s=hung)


def _read_resources(raw: Mapping, report: Report) -> Any:
    path, section = _section(raw, report, "resources", ("workers", "use_gpu", "cpus_per_worker",
                                                        "gpus_per_worker", "share", "warm_workers",
                                                        "collective_timeout",
                                                        "first_collective_timeout"))
    if section is BAD:
        return BAD
    workers = report.integer(section, path, "workers", default=1, minimum=1, maximum=100_000)
    use_gpu = report.flag(section, path, "use_gpu", default=False)
    cpus = report.number(section, path, "cpus_per_worker", default=1, above=0)
    gpus = report.number(section, path, "gpus_per_worker", default=None, minimum=0)
    share = report.number(section, path, "share", default=1.0, above=0)
    warm = report.flag(section, path, "warm_workers", default=True)
    timeout = _read_duration(section.get("collective_timeout"), path, report,
                                key="collective_timeout")
    first = _read_duration(section.get("first_collective_timeout"), path, report,
                           key="first_collective_timeout")
    if is_number(cpus) and cpus > 1 and cpus != int(cpus):
        cpus = report.add(path + ("cpus_per_worker",), "range", "must be a whole number when "
                          f"above 1; Ray splits only single CPUs (got {show(cpus)})")
    if is_number(gpus) and gpus > 1 and gpus != int(gpus):
        gpus = report.add(path + ("gpus_per_worker",), "range", "must be a whole number when "
                          f"above 1; Ray splits only single GPUs (got {show(gpus)})")
    if use_gpu is False and is_number(gpus) and gpus > 0:
        gpus = report.add(path + ("gpus_per_worker",), "conflict",
                          f"GPUs per worker need `use_gpu: true` (got {show(gpus)} "
                          "with use_gpu false)")
    if use_gpu is True and gpus == 0:
        gpus = report.add(path + ("gpus_per_worker",), "conflict",
                          "must be > 0 with `use_gpu: true` (got 0); set use_gpu: false to "
                          "train on CPUs")
    if (use_gpu is True and is_number(gpus) and 0 < gpus < 1 and is_number(workers)
            and workers > 1):
        gpus = report.add(path + ("gpus_per_worker",), "conflict",
                          f"{workers} workers at {show(gpus)} GPU each can put two ranks on "
                          "one GPU, which NCCL refuses (\"Duplicate GPU detected\"); give "
                          "each worker a whole GPU (gpus_per_worker: 1), or share GPUs "
                          "between one-worker trials (workers: 1)")
    if not ok(workers, use_gpu, cpus, gpus, share, warm, timeout, first):
        return BAD
    if gpus is None:
        gpus = 1 if use_gpu else 0
    return Resources(workers=workers, use_gpu=use_gpu, cpus_per_worker=cpus,
                     gpus_per_worker=gpus, share=float(share), warm_workers=warm,
                     collective_timeout_s=600.0 if timeout is None else timeout,
                     first_collective_timeout_s=60.0 if first is None else first)


def _read_budget(raw: Mapping, report: Report) -> Any:
    path, section = _section(raw, report, "budget", ("time", "deadline"))
    if section is BAD:
        return BAD
    seconds = _read_duration(section.get("time"), path, report)
    deadline = _read_deadline(section.get("deadline"), path, report)
    if not ok(seconds, deadline):
        return BAD
    return Budget(time_s=seconds, deadline=deadline)


def _read_duration(value: Any, path: tuple, report: Report, key: str = "time") -> Any:
    """A duration (``budget.time``, ``resources.collective_timeout``) in seconds."""
    if value is None:
        return None
    if value is REJECTED:
        return BAD
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return report.add(path + (key,), "type",
                          f"expected a duration such as 8h, 1h30m or 3600 {got(value)}")
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        kind = "format" if isinstance(value, str) else "range"
        return report.add(path + (key,), kind, str(exc))
    if seconds > 365 * 86400:
        return report.add(path + (key,), "range",
                          f"must be at most a year (got {show(value)})")
    return seconds


def _read_deadline(value: Any, path: tuple, report: Report) -> Any:
    """The deadline as written; it must parse. Whether it lies ahead is checked when a
    sweep starts with it (a sweep's stored space keeps a deadline that has passed)."""
    if value is None:
        return None
    if value is REJECTED:
        return BAD
    if isinstance(value, (datetime.date, datetime.datetime)):
        value = value.isoformat()
    if not isinstance(value, str):
        return report.add(path + ("deadline",), "type", "expected a time such as '07:00' or "
                          f"'2026-12-01T07:00' {got(value)}")
    try:
        parse_deadline(value, now=_EPOCH)
    except ValueError as exc:
        return report.add(path + ("deadline",), "format", str(exc))
    return value


_EPOCH = datetime.datetime(1970, 1, 2, tzinfo=datetime.timezone.utc)


def _read_storage(raw: Mapping, report: Report) -> Any:
    storage = report.text(raw, (), "storage", default="./runs")
    if isinstance(storage, str) and "\x00" in storage:
        return report.add(("storage",), "format", "must not contain a NUL character")
    if isinstance(storage, str) and "://" in storage:
        return report.add(("storage",), "format",
                          "must be a filesystem path; object-store URIs are not supported yet. "
                          f"On a multi-node cluster use a path every node mounts (NFS) {got(storage)}")
    if isinstance(storage, str):
        problem = storage_problem(storage)
        if problem:
            return report.add(("storage",), "storage", f"{problem} {got(storage)}")
    return storage


_SYSTEM_DIRS = ("/proc", "/sys", "/dev")


def storage_problem(storage: str) -> str | None:
    """Why ``storage`` cannot hold sweep directories, judged from the filesystem as it is
    now (nothing is created), or ``None``."""
    path = os.path.abspath(os.path.expanduser(storage))
    real = os.path.realpath(path)
    for system in _SYSTEM_DIRS:
        if real == system or real.startswith(system + "/"):
            return f"must be a directory for sweeps, not inside the system directory {system}"
    probe = path
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if os.path.lexists(probe) and not os.path.isdir(probe):
        what = "is" if probe == path else f"is inside {probe}, which is"
        return f"must be a directory for sweeps, but it {what} a file"
    return None


def _read_checkpoints(raw: Mapping, report: Report) -> Any:
    path, section = _section(raw, report, "checkpoints", ("keep", "keep_best_trials"))
    if section is BAD:
        return BAD
    keep = report.integer(section, path, "keep", default=2, minimum=1)
    best = report.integer(section, path, "keep_best_trials", default=3, minimum=0)
    return Checkpoints(keep=keep, keep_best_trials=best) if ok(keep, best) else BAD

