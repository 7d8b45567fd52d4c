"""Run and resume sweeps: the library API behind ``hpsearch run`` and ``hpsearch resume``.

Each entry point checks everything it can before it connects to Ray or touches a
directory, then hands the Tuner to :func:`hpsearch.driver.fit.fit`.
"""

from __future__ import annotations

import os
import sys

import yaml

from hpsearch.driver.fit import Interrupted, SweepResult, SweepRun, fit, new_tuner
from hpsearch.driver.plan import local_resources, make_plan
from hpsearch.driver.preflight import note_gpu_simulation, require_cuda_on_gpu_nodes
from hpsearch.errors import StorageError, SweepExistsError, SweepNotFoundError
from hpsearch.space.spec import Spec
from hpsearch.store.layout import SweepDir, remove_inside, write_atomic
from hpsearch.store.manifest import (
    command_line,
    driver_alive,
    is_ours,
    last_run,
    new_manifest,
    now_iso,
    read_manifest,
    record_driver,
    write_manifest,
)

__all__ = ["Interrupted", "SweepResult", "expand_name", "resume_sweep", "run_sweep",
           "sweep_dir_for"]


def run_sweep(
    spec: Spec,
    *,
    name: str | None = None,
    storage: str | None = None,
    address: str | None = None,
    max_concurrent: int | None = None,
    dry_run: bool = False,
    overwrite: bool = False,
    verbose: bool = False,
    stream=None,
) -> SweepResult:
    """Run a whole sweep of ``spec`` and write its tables.

    Args:
        spec: A validated space (:func:`hpsearch.load_space`).
        name: Sweep name (default ``spec.name``); the directory is ``<storage>/<name>``.
            The same rule as the space's ``name:`` applies: no ``/``, no ``..``.
        storage: Parent directory of sweeps (default ``spec.storage``). Must be shared
            (NFS) on a multi-node cluster.
        address: Ray cluster address; ``None`` uses ``$RAY_ADDRESS`` or a local Ray.
        max_concurrent: Overrides ``trials.max_concurrent``; checked against what fits.
        dry_run: Resolve resources and return the plan; start no trial.
        overwrite: Delete an existing sweep of the same name first (only a directory
            hpsearch created, and only once the new sweep can start).
        verbose: Show Ray's own logs and per-trial tables.
        stream: Where progress goes (default stdout).

    Raises:
        SweepExistsError: The sweep exists and ``overwrite`` is false, or the directory
            is not a sweep hpsearch created.
        ClusterError: The cluster is unreachable or cannot fit one trial.
        Interrupted: Ctrl-C; the tables are written and ``hpsearch resume`` continues.
            Also a ``KeyboardInterrupt``, so the Ctrl-C stops the caller too.
    """
    from hpsearch.driver.runners import resolve_runner

    stream = stream or sys.stdout
    sweep = sweep_dir_for(spec, name=name, storage=storage)
    runner = resolve_runner(spec)
    if dry_run and not (address or os.environ.get("RAY_ADDRESS")):
        plan = make_plan(spec, local_resources(), max_concurrent=max_concurrent)
        return SweepResult(sweep.path, "planned", plan)
    exists = os.path.lexists(sweep.path)
    if exists and not dry_run:
        _check_replaceable(sweep, overwrite)

    from hpsearch.driver.connect import connect

    where = address or os.environ.get("RAY_ADDRESS") or "a local Ray instance"
    print(f"connecting to {where}...", file=stream, flush=True)
    conn = connect(address, verbose=verbose)
    try:
        plan = make_plan(spec, conn.resources, max_concurrent=max_concurrent)
        if dry_run:
            return SweepResult(sweep.path, "planned", plan)
        require_cuda_on_gpu_nodes(spec)
        if exists:  # --overwrite, only now that the new sweep can start
            _check_replaceable(sweep, overwrite)
            remove_inside(sweep.storage, sweep.path)
        print(f"sweep {sweep.name!r} -> {sweep}", file=stream)
        for line in plan.lines(spec):
            print("  " + line, file=stream)
        stream.flush()
        _prepare_dir(sweep, spec)
        manifest = new_manifest(
            name=sweep.name, argv=command_line(), seed=spec.search.seed,
            cluster=conn.resources, address=conn.address,
            objective={"metric": spec.objective.metric, "mode": spec.objective.mode},
        )
        note_gpu_simulation(spec, manifest, stream)
        deadline_at = _deadline(spec)
        manifest["plan"] = {"slots": plan.slots, "rungs": list(plan.rungs),
                            "max_concurrent": max_concurrent,
                            "deadline": _iso(deadline_at)}
        _record_driver(manifest, conn)
        write_manifest(sweep, manifest)
        if spec.search.warm_start:
            spec = _warm_start(spec, sweep, manifest, stream)
            write_manifest(sweep, manifest)
        run = SweepRun(spec, sweep, runner, verbose=verbose, stream=stream,
                       deadline_at=deadline_at, slots=plan.slots)
        return fit(new_tuner(run, plan), run, plan, manifest)
    finally:
        if conn.started_local:
            conn.close()


def sweep_dir_for(spec: Spec, *, name: str | None = None,
                  storage: str | None = None) -> SweepDir:
    """Where a sweep of ``spec`` lives: ``name`` (default the space's, with ``{date}`` and
    ``{datetime}`` filled in) under the storage (``--storage`` > ``$HPSEARCH_STORAGE`` >
    the space's ``storage:`` > ``./runs``).

    Raises:
        InvalidArgumentError: The name or the storage is not allowed.
    """
    from hpsearch.store.layout import default_storage

    root = default_storage(storage, space_storage=spec.raw.get("storage"))
    return SweepDir.at(root, expand_name(name or spec.name))


def expand_name(template: str, now=None) -> str:
    """``lm-{date}`` -> ``lm-2026-11-30``; ``{datetime}`` gives ``2026-11-30-0107``
    (local time). Other braces are an error.

    Raises:
        InvalidArgumentError: An unknown ``{placeholder}``.
    """
    import re
    from datetime import datetime

    from hpsearch.errors import InvalidArgumentError

    now = now or datetime.now()
    values = {"date": now.strftime("%Y-%m-%d"), "datetime": now.strftime("%Y-%m-%d-%H%M")}
    unknown = [m for m in re.findall(r"{([^{}]*)}", template) if m not in values]
    if unknown:
        raise InvalidArgumentError(
            f"--name {template!r}: unknown placeholder {{{unknown[0]}}}; use {{date}} or "
            "{datetime}")
    return re.sub(r"{(date|datetime)}", lambda m: values[m.group(1)], template)


def _check_replaceable(sweep: SweepDir, overwrite: bool) -> None:
    """Refuse to start over an existing directory unless told to, and never over one
    hpsearch did not create or a sweep whose driver still runs."""
    if not sweep.exists():
        raise SweepExistsError(
            f"{sweep} exists and is not a sweep (it has no manifest.json); hpsearch will not "
            "write into or delete it. Pick another --name or --storage."
        )
    if not overwrite:
        raise SweepExistsError(
            f"a sweep named {sweep.name!r} already exists in {sweep.storage}. "
            f"Continue it with `hpsearch resume {sweep.name}`, pick another --name, "
            "or pass --overwrite to delete it and start again."
        )
    manifest = read_manifest(sweep)
    if not is_ours(manifest):
        raise SweepExistsError(
            f"{sweep} holds a manifest.json that hpsearch did not write; it will not delete "
            "that directory. Pick another --name or --storage."
        )
    _refuse_if_running(sweep, manifest)


def _refuse_if_running(sweep: SweepDir, manifest: dict) -> None:
    if manifest.get("status") == "running" and driver_alive(manifest):
        pid = (last_run(manifest).get("driver") or {}).get("pid")
        raise SweepExistsError(
            f"sweep {sweep.name!r} is still running (driver pid {pid} on this machine); stop "
            "it with Ctrl-C (or kill that pid) first"
        )


def _warm_start(spec: Spec, sweep: SweepDir, manifest: dict, stream) -> Spec:
    """Seed the new study with earlier sweeps' trials (:mod:`hpsearch.driver.warmstart`);
    returns the spec with the sweep's own sampler seed."""
    from dataclasses import replace

    import optuna

    from hpsearch.driver.searcher import open_study_storage
    from hpsearch.driver.warmstart import import_trials, resolve_sources, warm_seed

    spec = replace(spec, search=replace(spec.search,
                                        seed=warm_seed(spec.search.seed, sweep.name)))
    manifest["seed"] = spec.search.seed
    sources = resolve_sources(sweep, spec, spec.search.warm_start)
    if not sources:
        manifest["warm_start"] = {"from": [], "imported": 0, "note": "no earlier sweep"}
        print("warm start: no earlier sweep of this space yet; starting fresh", file=stream)
        return spec
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=open_study_storage(sweep), study_name=sweep.name, load_if_exists=True,
        direction="minimize" if spec.objective.mode == "min" else "maximize")
    summary = import_trials(spec, study, sources)
    manifest["warm_start"] = summary
    print(f"warm start: {summary['imported']} trials from {', '.join(summary['from'])}"
          f" ({summary['not_fitting']} outside this space, {summary['skipped']} failed or "
          f"unfinished); {len(summary['enqueued'])} best configurations run first",
          file=stream)
    return spec


def _deadline(spec: Spec) -> float | None:
    """The spec's deadline as epoch seconds, resolved now (``07:00`` is the next 07:00)."""
    if not spec.budget.deadline:
        return None
    from hpsearch.errors import InvalidArgumentError
    from hpsearch.space.duration import parse_deadline

    try:
        return parse_deadline(spec.budget.deadline).timestamp()
    except ValueError as exc:
        raise InvalidArgumentError(f"budget.deadline: {exc}") from None


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    from datetime import datetime

    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def _record_driver(manifest: dict, conn) -> None:
    from hpsearch.driver.repairs import local_ray_processes

    record_driver(manifest, local_ray=local_ray_processes() if conn.started_local else [])


def _prepare_dir(sweep: SweepDir, spec: Spec) -> None:
    try:
        sweep.path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"cannot create the sweep directory {sweep}: {exc.strerror or exc}. "
            "Choose a writable place with --storage."
        ) from None
    _write_space(sweep, spec)


def _write_space(sweep: SweepDir, spec: Spec) -> None:
    text = yaml.safe_dump(dict(spec.raw), sort_keys=False, allow_unicode=True)
    write_atomic(sweep.space, lambda tmp: tmp.write_text(text))


def _still_ahead(iso: str | None, stream) -> float | None:
    """A recorded deadline, if it is still ahead; a passed one no longer applies."""
    if not iso:
        return None
    from datetime import datetime

    try:
        at = datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return None
    import time

    if at <= time.time():
        print(f"the sweep's deadline {iso} has passed; this run has none "
              "(give one with --deadline)", file=stream)
        return None
    return at


def resume_sweep(
    name: str, *, storage: str = "./runs", address: str | None = None,
    trials: int | None = None, time_budget: str | None = None, deadline: str | None = None,
    max_concurrent: int | None = None, verbose: bool = False, stream=None,
) -> SweepResult:
    """Continue a sweep whose driver died or was interrupted, or extend a finished one.

    Finished trials are not rerun; trials that were running continue from their latest
    checkpoint; the Optuna study continues.

    Args:
        name: The sweep's name under ``storage``.
        trials: Raise the number of trials (``trials.num``) to this.
        time_budget: A new time budget for this run (``budget.time``).
        deadline: A new deadline (``budget.deadline``). Without one, the deadline the sweep
            ran with applies if it is still ahead.
        max_concurrent: Trials at once; default: the cap the sweep ran with, if any.

    Raises:
        SweepNotFoundError: No sweep of that name, or it never started a trial.
        DamagedSweepError: A file of the sweep cannot be read; nothing is changed.
    """
    from ray import tune

    from hpsearch.driver.connect import connect
    from hpsearch.driver.repairs import (
        replay_asha_rungs,
        restore_tuner,
        restored_scheduler,
        stop_orphaned_local_ray,
    )
    from hpsearch.driver.runners import resolve_runner
    from hpsearch.driver.searcher import check_sweep_study
    from hpsearch.space import load_space
    from hpsearch.store.records import TrialRecords
    from hpsearch.store.tables import load_tables

    stream = stream or sys.stdout
    sweep = SweepDir.at(storage, name)
    if not sweep.exists():
        raise SweepNotFoundError(
            f"no sweep named {name!r} in {sweep.storage}; `hpsearch ls --storage DIR` "
            "lists the sweeps there"
        )
    manifest = read_manifest(sweep)
    overrides = [f"trials.num={trials}"] if trials is not None else []
    if time_budget is not None:
        overrides.append(f"budget.time={time_budget}")
    overrides.append(f"budget.deadline={deadline}" if deadline is not None
                     else "budget.deadline=null")  # resolved below from the manifest
    spec = load_space(sweep.space, overrides)
    _refuse_if_running(sweep, manifest)
    plan_record = manifest.get("plan") if isinstance(manifest.get("plan"), dict) else {}
    deadline_at = _deadline(spec) if deadline is not None else _still_ahead(
        plan_record.get("deadline"), stream)
    if max_concurrent is None:
        max_concurrent = plan_record.get("max_concurrent")
    records = TrialRecords(spec)
    records.load(*load_tables(sweep))  # read and checked before anything is changed
    check_sweep_study(sweep, (int(row["optuna_trial"]) for row in records.trials.values()
                              if row.get("optuna_trial") is not None))
    runner = resolve_runner(spec)
    stopped = stop_orphaned_local_ray(manifest)
    if stopped:
        print(f"stopped {len(stopped)} Ray process(es) orphaned by the killed driver",
              file=stream)
    conn = connect(address, verbose=verbose)
    try:
        if not tune.Tuner.can_restore(os.fspath(sweep.tune)):
            raise SweepNotFoundError(
                f"sweep {name!r} has no Ray Tune state to resume from (it stopped before its "
                f"first trial started). Start it again with `hpsearch run --overwrite`."
            )
        plan = make_plan(spec, conn.resources, max_concurrent=max_concurrent)
        require_cuda_on_gpu_nodes(spec)
        run = SweepRun(spec, sweep, runner, verbose=verbose, stream=stream, records=records,
                       deadline_at=deadline_at, slots=plan.slots)
        tuner = restore_tuner(sweep, runner.trainable(sweep, resumed=True), callbacks=run.callbacks,
                              stopper=run.stopper, max_concurrent=plan.slots,
                              time_budget_s=run.time_budget_s)
        if overrides[:-1] or deadline is not None:  # extended: the sweep's space as now run
            _write_space(sweep, spec)
        if spec.scheduler.type == "asha":
            replay_asha_rungs(restored_scheduler(tuner), run.records.history, spec)
        manifest["status"] = "running"
        manifest["plan"] = {**plan_record, "slots": plan.slots, "rungs": list(plan.rungs),
                            "max_concurrent": max_concurrent, "deadline": _iso(deadline_at)}
        manifest.setdefault("runs", []).append({"command": command_line(),
                                                "started_at": now_iso()})
        note_gpu_simulation(spec, manifest, stream)
        _record_driver(manifest, conn)
        write_manifest(sweep, manifest)
        return fit(tuner, run, plan, manifest)
    finally:
        if conn.started_local:
            conn.close()
