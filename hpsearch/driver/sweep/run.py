"""Run and resume sweeps: the library API behind ``hpsearch run`` and ``hpsearch resume``.

Both check everything they can before they connect to Ray or touch a directory, share one
prelude (:func:`_prepared`: the trainable resolved, the disk checked, the cluster
connected, the plan made), open the sweep's record in one operation
(:meth:`SweepRecord.create`, :meth:`SweepRecord.open`, which reads, checks and reconciles
a resumed sweep before anything changes), and then go through the same steps
(:func:`_drive`): the run begins in the manifest, the run's plug-ins are built and a new
Tuner fits (:class:`~hpsearch.driver.sweep.fit.SweepRun`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from hpsearch.driver.cluster.preflight import require_cuda_on_gpu_nodes, say_gpu_simulation
from hpsearch.driver.limits.plan import Plan, local_resources, make_plan
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.sweep.fit import SweepRun
from hpsearch.driver.sweep.result import Interrupted, SweepResult
from hpsearch.driver.sweep.storage import StorageNeed, check_free_space, disk_full_error, storage_need
from hpsearch.driver.sweep.timing import deadline_at, plan_record, still_ahead
from hpsearch.driver.trials.runners import Runner
from hpsearch.errors import DiskFullError, is_disk_full
from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store import sweeps
from hpsearch.store.layout import SweepDir, fmt_bytes, free_bytes

if TYPE_CHECKING:
    from hpsearch.driver.cluster.connect import Connection

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
    stream = stream or sys.stdout
    sweep = sweep_dir_for(spec, name=name, storage=storage)
    if dry_run and _cluster_address(address) is None:
        from hpsearch.driver.trials.resolve import checkpoint_estimate

        plan = make_plan(spec, local_resources(), max_concurrent=max_concurrent)
        need = storage_need(spec, plan.slots, checkpoint=checkpoint_estimate(spec))
        return SweepResult(sweep.path, st.SWEEP_PLANNED, replace(plan, storage=need.line(
            free_bytes(sweep.storage))))
    exists = False if dry_run else sweeps.check_new(sweep, overwrite=overwrite)
    if spec.search.warm_start:  # a misspelt name is refused before anything is made
        from hpsearch.driver.search.warmstart import resolve_sources

        resolve_sources(sweep, spec, tuple(n for n in spec.search.warm_start if n != "latest"))
    with _prepared(spec, sweep, address=address, max_concurrent=max_concurrent,
                   verbose=verbose, stream=stream, dry_run=dry_run) as setup:
        if dry_run:
            return SweepResult(sweep.path, st.SWEEP_PLANNED, setup.plan)
        until = deadline_at(spec)
        with _disk_full_ends(sweep, setup.need, made=True):
            record = SweepRecord.create(
                spec, sweep, cluster=setup.conn.resources, address=setup.conn.address,
                plan=plan_record(setup.plan, max_concurrent=max_concurrent, deadline=until),
                replace=exists)
        print(f"sweep {sweep.name!r} -> {sweep}", file=stream)
        for line in setup.plan.lines(spec):
            print("  " + line, file=stream)
        stream.flush()
        if spec.search.warm_start:
            from hpsearch.driver.search.warmstart import warm_start

            warm_start(record, stream)
        return _drive(record, setup, deadline=until, verbose=verbose, stream=stream)


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
    record = SweepRecord.open(spec, sweep, manifest)  # read and checked before any change
    _stop_orphans(manifest, stream)
    with _prepared(spec, sweep, address=address, max_concurrent=max_concurrent,
                   verbose=verbose, stream=stream, resume=True) as setup:
        if record.unfinished:
            print(f"continuing {len(record.unfinished)} unfinished trial(s) from their "
                  "newest checkpoints", file=stream)
        return _drive(record, setup, deadline=until, verbose=verbose, stream=stream,
                      plan={**before, **plan_record(setup.plan, max_concurrent=max_concurrent,
                                                    deadline=until)},
                      space=spec.raw if extended else None)


@dataclass(frozen=True)
class _Setup:
    """What a run and a resume have once connected: the cluster, the plan on it, the
    runner placed by it, and what the sweep may hold on its storage."""

    conn: Connection
    plan: Plan
    runner: Runner
    need: StorageNeed
    trackers: tuple = ()


@contextlib.contextmanager
def _prepared(spec: Spec, sweep: SweepDir, *, address: str | None,
              max_concurrent: int | None, verbose: bool, stream: Any, resume: bool = False,
              dry_run: bool = False) -> Iterator[_Setup]:
    """The prelude a run and a resume share: the trainable resolved, the disk checked for
    one trial before Ray starts, then the cluster connected, the plan made on it and the
    disk checked again for the plan's slots (a dry run only says it), and CUDA checked
    on the GPU nodes. A local Ray it started goes when the block ends."""
    from hpsearch.driver.trials.resolve import checkpoint_estimate, resolve_runner

    runner = resolve_runner(spec)
    trackers = () if dry_run else _checked_trackers(spec, sweep)
    checkpoint = checkpoint_estimate(spec)
    measured = sweep if resume else None  # a resumed sweep's own checkpoints are measured
    if not dry_run:  # a full disk is said before Ray starts (one trial's worth), then per plan
        check_free_space(storage_need(spec, 1, sweep=measured, checkpoint=checkpoint), sweep,
                         resume=resume)
    with _connected(address, verbose, stream) as conn:
        plan = make_plan(spec, conn.resources, max_concurrent=max_concurrent, nodes=conn.nodes)
        need = storage_need(spec, plan.slots, sweep=measured, checkpoint=checkpoint)
        if dry_run:
            yield _Setup(conn, replace(plan, storage=need.line(free_bytes(sweep.storage))),
                         runner, need)
            return
        plan = replace(plan, storage=check_free_space(need, sweep, resume=resume))
        require_cuda_on_gpu_nodes(spec)
        yield _Setup(conn, plan, replace(runner, placement=plan.placement), need, trackers)


def _checked_trackers(spec: Spec, sweep: SweepDir) -> tuple:
    """The trackers ``track:`` asks for, each reached once before anything starts.

    Raises:
        TrackingError: One cannot be reached (its one line).
    """
    if not spec.track.any:
        return ()
    from hpsearch.track import check_trackers, make_trackers

    trackers = make_trackers(spec.track, sweep_name=sweep.name, tensorboard=sweep.tensorboard)
    check_trackers(trackers)
    return tuple(trackers)


def _drive(record: SweepRecord, setup: _Setup, *, deadline: float | None, verbose: bool,
           stream: Any, plan: Mapping[str, Any] | None = None,
           space: Mapping[str, Any] | None = None) -> SweepResult:
    """What a new run and a resumed one share once the record is open: the run begins in
    the manifest (a resume's ``plan`` and changed ``space`` with it), then the run's
    plug-ins and the fit."""
    from hpsearch.driver.internals import local_ray_processes

    local_ray = local_ray_processes() if setup.conn.started_local else []
    with _disk_full_ends(record.sweep, setup.need, made=False):
        record.begin(local_ray=local_ray, plan=plan, space=space,
                     simulated_gpu=say_gpu_simulation(record.spec, stream))
        run = SweepRun(record, setup.runner, setup.plan, deadline_at=deadline,
                       stream=stream, verbose=verbose, need=setup.need,
                       trackers=setup.trackers)
    return run.fit()


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
    from hpsearch.space.overrides import option_overrides

    overrides = option_overrides(trials=trials, time_budget=time_budget, deadline=deadline)
    # Without --deadline, the one the sweep ran with applies if still ahead (resolved
    # from the manifest, not from the space, where "07:00" would mean the next 07:00).
    never = [] if deadline is not None else ["budget.deadline=null"]
    return load_space(sweep.space, overrides + never + _brackets_as_made(sweep)), bool(overrides)


def _brackets_as_made(sweep: SweepDir) -> list[str]:
    """A sweep's space file holds the brackets it was made with, resolved; one made before
    ``brackets`` had a default of its own left them out, and ran one."""
    import yaml

    try:
        raw = yaml.safe_load(sweep.space.read_text())
        scheduler = raw.get("scheduler") or {}
        if "brackets" in scheduler or scheduler.get("type", "asha") != "asha":
            return []
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return []  # load_space says what is wrong with it
    return ["scheduler.brackets=1"]


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
