"""Run and resume sweeps: the library API behind ``hpsearch run`` and ``hpsearch resume``.

Both check everything they can before they connect to Ray or touch a directory, open the
sweep directory in one operation of the store (:mod:`hpsearch.store.sweeps`), and then go
through the same steps (:func:`_drive`): plan on the cluster, record the driver, build
the run's plug-ins and fit a new Tuner (:class:`~hpsearch.driver.sweep.fit.SweepRun`).
A resume differs only in what it starts from: the records and study of the sweep, made
to agree (:func:`~hpsearch.driver.sweep.record.reconcile`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace
from typing import Any, Iterator, Sequence

from hpsearch.driver.cluster.preflight import note_gpu_simulation, require_cuda_on_gpu_nodes
from hpsearch.driver.limits.plan import local_resources, make_plan
from hpsearch.driver.search.study import RecordedTrial
from hpsearch.driver.sweep.fit import SweepRun
from hpsearch.driver.sweep.result import Interrupted, SweepResult
from hpsearch.driver.sweep.storage import StorageNeed, check_free_space, disk_full_error, storage_need
from hpsearch.driver.sweep.timing import deadline_at, plan_record, still_ahead
from hpsearch.errors import DiskFullError, SweepNotFoundError, is_disk_full
from hpsearch.space.spec import Spec
from hpsearch.store import sweeps
from hpsearch.store.layout import SweepDir, fmt_bytes, free_bytes
from hpsearch.store.manifest import command_line, new_manifest, record_driver, write_manifest
from hpsearch.store.records import TrialRecords

__all__ = ["Interrupted", "SweepResult", "expand_name", "resume_sweep", "run_sweep",
           "sweep_dir_for"]


def run_sweep(
    spec: Spec, *, name: str | None = None, storage: str | None = None,
    address: str | None = None, max_concurrent: int | None = None, dry_run: bool = False,
    overwrite: bool = False, verbose: bool = False, stream=None,
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
        DiskFullError: The storage has too little free space to start (nothing is
            written), or it filled during the sweep (trials paused; resumable).
    """
    from hpsearch.driver.trials.resolve import checkpoint_estimate, resolve_runner

    stream = stream or sys.stdout
    sweep = sweep_dir_for(spec, name=name, storage=storage)
    runner = resolve_runner(spec)
    checkpoint = checkpoint_estimate(spec)
    if dry_run and _cluster_address(address) is None:
        plan = make_plan(spec, local_resources(), max_concurrent=max_concurrent)
        need = storage_need(spec, plan.slots, checkpoint=checkpoint)
        return SweepResult(sweep.path, "planned", replace(plan, storage=need.line(
            free_bytes(sweep.storage))))
    exists = False if dry_run else sweeps.check_new(sweep, overwrite=overwrite)
    if not dry_run:  # a full disk is said before Ray starts (one trial's worth), then per plan
        check_free_space(storage_need(spec, 1, checkpoint=checkpoint), sweep, resume=False)
    with _connected(address, verbose, stream) as conn:
        plan = make_plan(spec, conn.resources, max_concurrent=max_concurrent, nodes=conn.nodes)
        runner = replace(runner, placement=plan.placement)
        need = storage_need(spec, plan.slots, checkpoint=checkpoint)
        if dry_run:
            return SweepResult(sweep.path, "planned", replace(plan, storage=need.line(
                free_bytes(sweep.storage))))
        plan = replace(plan, storage=check_free_space(need, sweep, resume=False))
        require_cuda_on_gpu_nodes(spec)
        until = deadline_at(spec)
        manifest = new_manifest(
            name=sweep.name, argv=command_line(), seed=spec.search.seed,
            cluster=conn.resources, address=conn.address,
            objective={"metric": spec.objective.metric, "mode": spec.objective.mode})
        manifest["plan"] = plan_record(plan, max_concurrent=max_concurrent, deadline=until)
        with _disk_full_ends(sweep, need, made=True):
            sweeps.create(sweep, spec.raw, manifest, replace=exists)
        print(f"sweep {sweep.name!r} -> {sweep}", file=stream)
        for line in plan.lines(spec):
            print("  " + line, file=stream)
        stream.flush()
        if spec.search.warm_start:
            from hpsearch.driver.sweep.warm import warm_start

            spec = warm_start(spec, sweep, manifest, stream)
        return _drive(spec, sweep, runner, plan, manifest, conn, records=TrialRecords(spec),
                      deadline=until, verbose=verbose, stream=stream, need=need)


def resume_sweep(
    name: str, *, storage: str = "./runs", address: str | None = None,
    trials: int | None = None, time_budget: str | None = None, deadline: str | None = None,
    max_concurrent: int | None = None, verbose: bool = False, stream=None,
) -> SweepResult:
    """Continue a sweep whose driver died or was interrupted, or extend a finished one.

    Finished trials are kept as they are; trials that were running continue, under their
    own ids, from their newest checkpoint; the Optuna study continues.

    Args:
        name: The sweep's name under ``storage``.
        trials: Raise the number of trials (``trials.num``) to this.
        time_budget: A new time budget for this run (``budget.time``).
        deadline: A new deadline (``budget.deadline``). Without one, the deadline the sweep
            ran with applies if it is still ahead.
        max_concurrent: Trials at once; default: the cap the sweep ran with, if any.

    Raises:
        SweepNotFoundError: No sweep of that name, or it is one hpsearch can no longer
            resume (it says how to continue instead).
        DamagedSweepError: A file of the sweep cannot be read; nothing is changed.
    """
    from hpsearch.driver.sweep.record import reconcile
    from hpsearch.driver.trials.resolve import checkpoint_estimate, resolve_runner

    stream = stream or sys.stdout
    sweep = SweepDir.at(storage, name)
    manifest = sweeps.open_existing(sweep)
    spec, extended = _resumed_spec(sweep, trials=trials, time_budget=time_budget,
                                   deadline=deadline)
    before = manifest.get("plan") if isinstance(manifest.get("plan"), dict) else {}
    until = deadline_at(spec) if deadline is not None else still_ahead(before.get("deadline"),
                                                                       stream)
    if max_concurrent is None:
        max_concurrent = before.get("max_concurrent")
    records, recorded = _read_record(sweep, spec)
    runner = resolve_runner(spec)
    checkpoint = checkpoint_estimate(spec)
    check_free_space(storage_need(spec, 1, sweep=sweep, checkpoint=checkpoint), sweep,
                     resume=True)  # before Ray starts; again below with the plan's slots
    _stop_orphans(manifest, stream)
    with _connected(address, verbose, stream) as conn:
        plan = make_plan(spec, conn.resources, max_concurrent=max_concurrent, nodes=conn.nodes)
        runner = replace(runner, placement=plan.placement)
        need = storage_need(spec, plan.slots, sweep=sweep, checkpoint=checkpoint)
        plan = replace(plan, storage=check_free_space(need, sweep, resume=True))
        require_cuda_on_gpu_nodes(spec)
        unfinished = reconcile(records, recorded)
        with _disk_full_ends(sweep, need, made=False):
            if extended:  # the sweep's space as now run
                sweeps.write_space(sweep, spec.raw)
            sweeps.begin_run(sweep, manifest, plan={**before, **plan_record(
                plan, max_concurrent=max_concurrent, deadline=until)})
        if unfinished:
            print(f"continuing {len(unfinished)} unfinished trial(s) from their newest "
                  "checkpoints", file=stream)
        return _drive(spec, sweep, runner, plan, manifest, conn, records=records,
                      recorded=recorded, unfinished=unfinished, deadline=until,
                      verbose=verbose, stream=stream, need=need)


def _drive(spec: Spec, sweep: SweepDir, runner: Any, plan: Any, manifest: dict, conn: Any, *,
           records: TrialRecords, deadline: float | None, verbose: bool, stream: Any,
           need: StorageNeed, recorded: Sequence[RecordedTrial] = (),
           unfinished: Sequence[RecordedTrial] = ()) -> SweepResult:
    """What a new run and a resumed one share once the directory is open: the driver's
    record, the run's plug-ins, the fit."""
    from hpsearch.driver.internals import local_ray_processes

    note_gpu_simulation(spec, manifest, stream)
    record_driver(manifest, local_ray=local_ray_processes() if conn.started_local else [])
    with _disk_full_ends(sweep, need, made=False):
        write_manifest(sweep, manifest)
        run = SweepRun(spec, sweep, runner, plan, records=records, recorded=recorded,
                       unfinished=unfinished, deadline_at=deadline, stream=stream,
                       verbose=verbose, need=need)
    return run.fit(manifest)


@contextlib.contextmanager
def _disk_full_ends(sweep: SweepDir, need: StorageNeed, *, made: bool) -> Iterator[None]:
    """A full disk while the sweep is set up, before any trial: its one line. A sweep
    this run was making is taken away again (its directory holds nothing yet); an existing
    one keeps its files, each whole, and is resumed later."""
    try:
        yield
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        if made:
            sweeps.abandon(sweep)
            raise DiskFullError(
                f"the disk holding {sweep.storage} is full ({fmt_bytes(free_bytes(sweep.storage))} "
                f"free): nothing was kept of sweep {sweep.name!r}. Free space there (it may "
                f"need up to {fmt_bytes(need.total)}), then run this command again.") from None
        raise disk_full_error(sweep, need) from None


def _resumed_spec(sweep: SweepDir, *, trials: int | None, time_budget: str | None,
                  deadline: str | None) -> tuple[Spec, bool]:
    """The space a resume runs (``--trials``, ``--time-budget``, ``--deadline`` applied),
    and whether it differs from the sweep's own."""
    from hpsearch.space import load_space

    overrides = [f"trials.num={trials}"] if trials is not None else []
    if time_budget is not None:
        overrides.append(f"budget.time={time_budget}")
    # Without --deadline, the one the sweep ran with applies if still ahead (resolved
    # from the manifest, not from the space, where "07:00" would mean the next 07:00).
    overrides.append(f"budget.deadline={deadline}" if deadline is not None
                     else "budget.deadline=null")
    return load_space(sweep.space, overrides), bool(overrides[:-1]) or deadline is not None


def _read_record(sweep: SweepDir, spec: Spec) -> tuple[TrialRecords, list[RecordedTrial]]:
    """The sweep's records (from its tables) and its trials as the study records them,
    both read and checked before anything is changed.

    Raises:
        DamagedSweepError: A table or the study cannot be read.
        SweepNotFoundError: The tables hold trials the study does not name: a sweep of
            an hpsearch from before trials were linked to the study, which cannot resume.
    """
    from hpsearch.driver.search.study import check_sweep_study, recorded_trials
    from hpsearch.store.tables import load_tables

    records = TrialRecords(spec)
    records.load(*load_tables(sweep))
    study = check_sweep_study(sweep, (int(row["optuna_trial"]) for row in records.trials.values()
                                      if row.get("optuna_trial") is not None))
    recorded = recorded_trials(study) if study is not None else []
    named = {t.trial_id for t in recorded}
    if any(trial_id not in named for trial_id in records.trials):
        raise SweepNotFoundError(
            f"sweep {sweep.name!r} was written by an older hpsearch whose study does not name "
            f"its trials, so it cannot be resumed; its tables stay readable. Continue with a "
            f"new sweep that learns from it: `hpsearch run {sweep.space} --warm-start "
            f"{sweep.name} --name {sweep.name}-2`")
    return records, recorded


def _stop_orphans(manifest: dict, stream: Any) -> None:
    from hpsearch.driver.cluster.orphans import stop_orphaned_local_ray

    stopped = stop_orphaned_local_ray(manifest)
    if stopped:
        print(f"stopped {len(stopped)} Ray process(es) orphaned by the killed driver",
              file=stream)


@contextlib.contextmanager
def _connected(address: str | None, verbose: bool, stream: Any) -> Iterator[Any]:
    """A Ray connection for the run; a local instance hpsearch started is shut down after."""
    from hpsearch.driver.cluster.connect import connect

    print(f"connecting to {_cluster_address(address) or 'a local Ray instance'}...",
          file=stream, flush=True)
    conn = connect(address, verbose=verbose)
    try:
        yield conn
    finally:
        if conn.started_local:
            conn.close()


def _cluster_address(address: str | None) -> str | None:
    """The cluster a run connects to: ``address``, else ``$RAY_ADDRESS``; ``None`` (and
    ``local``) mean a local instance, or the ``ray start`` cluster on this machine."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    return None if address == "local" else address


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
