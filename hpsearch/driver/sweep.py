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
from hpsearch.driver.preflight import require_cuda_on_gpu_nodes
from hpsearch.errors import StorageError, SweepExistsError, SweepNotFoundError
from hpsearch.space.spec import Spec
from hpsearch.store.layout import SweepDir, remove_inside
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

__all__ = ["Interrupted", "SweepResult", "resume_sweep", "run_sweep"]


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
    """
    from hpsearch.driver.runners import resolve_runner

    stream = stream or sys.stdout
    sweep = SweepDir.at(storage or spec.storage, name or spec.name)
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
        manifest["plan"] = {"slots": plan.slots, "rungs": list(plan.rungs)}
        _record_driver(manifest, conn)
        write_manifest(sweep, manifest)
        run = SweepRun(spec, sweep, runner, verbose=verbose, stream=stream)
        return fit(new_tuner(run, plan), run, plan, manifest)
    finally:
        if conn.started_local:
            conn.close()


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


def _record_driver(manifest: dict, conn) -> None:
    from hpsearch.driver.repairs import local_ray_processes

    record_driver(manifest, local_ray=local_ray_processes() if conn.started_local else [])


def _prepare_dir(sweep: SweepDir, spec: Spec) -> None:
    try:
        sweep.path.mkdir(parents=True, exist_ok=True)
        sweep.space.write_text(yaml.safe_dump(dict(spec.raw), sort_keys=False,
                                              allow_unicode=True))
    except OSError as exc:
        raise StorageError(
            f"cannot create the sweep directory {sweep}: {exc.strerror or exc}. "
            "Choose a writable place with --storage."
        ) from None


def resume_sweep(
    name: str, *, storage: str = "./runs", address: str | None = None,
    verbose: bool = False, stream=None,
) -> SweepResult:
    """Continue a sweep whose driver died or was interrupted.

    Finished trials are not rerun; trials that were running continue from their latest
    checkpoint; the Optuna study continues.

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
    spec = load_space(sweep.space)
    _refuse_if_running(sweep, manifest)
    records = TrialRecords(spec)
    records.load(*load_tables(sweep))  # read and checked before anything is changed
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
        plan = make_plan(spec, conn.resources)
        require_cuda_on_gpu_nodes(spec)
        run = SweepRun(spec, sweep, runner, verbose=verbose, stream=stream, records=records)
        tuner = restore_tuner(sweep, runner.trainable(sweep), callbacks=run.callbacks,
                              stopper=run.stopper, max_concurrent=plan.slots)
        if spec.scheduler.type == "asha":
            replay_asha_rungs(restored_scheduler(tuner), run.records.history, spec)
        manifest["status"] = "running"
        manifest.setdefault("runs", []).append({"command": command_line(),
                                                "started_at": now_iso()})
        _record_driver(manifest, conn)
        write_manifest(sweep, manifest)
        return fit(tuner, run, plan, manifest)
    finally:
        if conn.started_local:
            conn.close()
