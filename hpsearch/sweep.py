"""Run and resume sweeps: the Tuner, the sweep directory, the manifest, the callbacks.

Layout of a sweep directory (``<storage>/<name>/``)::

    space.yaml        the space as run, after overrides
    manifest.json     command, versions, git state, host, seeds, times, status
    trials.parquet    one row per trial            (docs/trial-tables.md)
    history.parquet   one row per report per trial
    optuna.db         the Optuna study (SQLite): optuna.load_study / optuna-dashboard
    tune/             Ray Tune's experiment state (what `hpsearch resume` restores)
    checkpoints/      one-worker trials' checkpoints, <trial_id>/checkpoint_<step>
    train/            Ray Train runs of multi-worker trials (their checkpoints)
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpsearch.errors import HpsearchError, StorageError, SweepExistsError, SweepNotFoundError
from hpsearch.manifest import (
    MANIFEST_FILE,
    command_line,
    new_manifest,
    now_iso,
    read_manifest,
    write_manifest,
)
from hpsearch.plan import Plan, local_resources, make_plan
from hpsearch.space.spec import Spec, Trials

OPTUNA_FILE = "optuna.db"
TUNE_DIR = "tune"
SPACE_FILE = "space.yaml"

EXIT_OK, EXIT_NO_TRIAL, EXIT_INTERRUPTED = 0, 3, 130


class Interrupted(HpsearchError):
    """Ctrl-C stopped the sweep; the tables are written and it can be resumed."""

    exit_code = EXIT_INTERRUPTED


@dataclass
class SweepResult:
    """What :func:`run_sweep` returns.

    Attributes:
        sweep_dir: The sweep directory.
        status: ``finished``, ``no_trial_completed``, ``interrupted`` or ``planned``.
        best: The best trial's row of the trial table (``None`` if none has a value).
        plan: Slots, rungs and cost estimate.
    """

    sweep_dir: Path
    status: str
    plan: Plan
    best: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return {"finished": EXIT_OK, "planned": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(
            self.status, EXIT_NO_TRIAL
        )


def storage_root(storage: str | os.PathLike) -> Path:
    """The directory holding sweeps; object-store URIs are refused (not supported yet)."""
    if "://" in str(storage):
        raise StorageError(
            f"--storage must be a filesystem path, not {str(storage)!r}: object-store URIs are "
            "not supported yet. On a multi-node cluster use a path every node mounts (NFS)."
        )
    return Path(storage).expanduser().resolve()


def sweep_dir_for(spec: Spec, *, name: str | None = None, storage: str | None = None) -> Path:
    return storage_root(storage or spec.storage) / (name or spec.name)


def optuna_storage_url(sweep_dir: str | os.PathLike) -> str:
    return f"sqlite:///{Path(sweep_dir).resolve() / OPTUNA_FILE}"


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
        storage: Parent directory of sweeps (default ``spec.storage``). Must be shared
            (NFS, object store mount) on a multi-node cluster.
        address: Ray cluster address; ``None`` uses ``$RAY_ADDRESS`` or a local Ray.
        max_concurrent: Overrides ``trials.max_concurrent``; checked against what fits.
        dry_run: Resolve resources and return the plan; start no trial.
        overwrite: Delete an existing sweep of the same name first.
        verbose: Show Ray's own logs and per-trial tables.
        stream: Where progress goes (default stdout).

    Raises:
        SweepExistsError: The sweep exists and ``overwrite`` is false.
        ClusterError: The cluster is unreachable or cannot fit one trial.
        Interrupted: Ctrl-C; the tables are written and ``hpsearch resume`` continues.
    """
    from hpsearch.trial import check_harness_config

    stream = stream or sys.stdout
    sweep_dir = sweep_dir_for(spec, name=name, storage=storage)
    check_harness_config(spec)
    name = sweep_dir.name
    if dry_run and not (address or os.environ.get("RAY_ADDRESS")):
        plan = make_plan(spec, local_resources(), max_concurrent=max_concurrent)
        return SweepResult(sweep_dir, "planned", plan)
    exists = (sweep_dir / MANIFEST_FILE).exists()
    if exists and not dry_run and not overwrite:
        raise SweepExistsError(
            f"a sweep named {name!r} already exists in {sweep_dir.parent}. "
            f"Continue it with `hpsearch resume {name}`, pick another --name, "
            "or pass --overwrite to delete it and start again."
        )

    from hpsearch.cluster import connect

    where = address or os.environ.get("RAY_ADDRESS") or "a local Ray instance"
    print(f"connecting to {where}...", file=stream, flush=True)
    conn = connect(address, verbose=verbose)
    try:
        plan = make_plan(spec, conn.resources, max_concurrent=max_concurrent)
        if dry_run:
            return SweepResult(sweep_dir, "planned", plan)
        if exists:  # --overwrite, only now that the new sweep can start
            _refuse_if_running(sweep_dir, name)
            shutil.rmtree(sweep_dir)
        print(f"sweep {name!r} -> {sweep_dir}", file=stream)
        for line in plan.lines(spec):
            print("  " + line, file=stream)
        stream.flush()
        _prepare_dir(sweep_dir, spec)
        manifest = new_manifest(
            name=name, argv=command_line(), seed=spec.search.seed, cluster=conn.resources,
            address=conn.address, objective={"metric": spec.objective.metric,
                                             "mode": spec.objective.mode},
        )
        manifest["plan"] = {"slots": plan.slots, "rungs": list(plan.rungs)}
        _record_driver(manifest, conn)
        write_manifest(sweep_dir, manifest)
        tuner = _new_tuner(spec, sweep_dir, plan, verbose=verbose, stream=stream)
        return _fit(tuner, spec, sweep_dir, plan, manifest)
    finally:
        if conn.started_local:
            conn.close()


def _refuse_if_running(sweep_dir: Path, name: str) -> None:
    from hpsearch.recovery import driver_alive

    manifest = read_manifest(sweep_dir)
    if manifest.get("status") == "running" and driver_alive(manifest):
        pid = manifest["runs"][-1]["driver_pid"]
        raise SweepExistsError(
            f"sweep {name!r} is still running (driver pid {pid} on this machine); stop it "
            "with Ctrl-C (or kill that pid) first"
        )


def _record_driver(manifest: dict, conn) -> None:
    """Who runs this sweep, so a later `resume` can tell a dead driver's orphaned local Ray
    instance from a live sweep."""
    from hpsearch.recovery import local_ray_processes

    from hpsearch.recovery import this_machine

    run = manifest["runs"][-1]
    run["machine"] = this_machine()
    run["driver_pid"] = os.getpid()
    run["local_ray_pids"] = local_ray_processes() if conn.started_local else []


def _prepare_dir(sweep_dir: Path, spec: Spec) -> None:
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / SPACE_FILE).write_text(
            yaml.safe_dump(dict(spec.raw), sort_keys=False, allow_unicode=True)
        )
    except OSError as exc:
        raise StorageError(
            f"cannot create the sweep directory {sweep_dir}: {exc.strerror or exc}. "
            "Choose a writable place with --storage."
        ) from None


# --- the Tuner -----------------------------------------------------------------------


class _Run:
    """Per-run objects shared by a new sweep and a resumed one."""

    def __init__(self, spec: Spec, sweep_dir: Path, *, verbose: bool, stream, resume: bool):
        from hpsearch.callbacks import AllFailedStopper, ProgressCallback, TablesCallback
        from hpsearch.tables import TrialRecords, read_history, read_trials

        self.records = TrialRecords(spec)
        if resume:  # a driver killed mid-write leaves its temporary table behind
            for stale in sweep_dir.glob(".*.parquet.tmp-*"):
                stale.unlink(missing_ok=True)
        if resume and (sweep_dir / "trials.parquet").exists():
            self.records.load(
                read_trials(sweep_dir).to_dict("records"),
                read_history(sweep_dir).to_dict("records"),
            )
        self.tables = TablesCallback(self.records, str(sweep_dir))
        self.progress = ProgressCallback(self.records, spec, stream=stream)
        self.stopper = AllFailedStopper(self.records, str(sweep_dir),
                                        threshold=min(spec.trials.num, 3))
        self.verbose = verbose

    @property
    def callbacks(self) -> list:
        # Tables first: progress reads the records the tables callback has just updated.
        return [self.tables, self.progress]


def _run_config(spec: Spec, sweep_dir: Path, run: _Run):
    from ray import tune

    from hpsearch.cluster import uses_worker_group

    return tune.RunConfig(
        name=TUNE_DIR,
        storage_path=str(sweep_dir),
        callbacks=run.callbacks,
        stop=run.stopper,
        verbose=2 if run.verbose else 0,
        # Ray Train retries a multi-worker trial's worker group itself; retrying the Tune
        # trial too would run a failing trial (max_failures + 1) ** 2 times.
        failure_config=tune.FailureConfig(
            max_failures=0 if uses_worker_group(spec) else spec.trials.max_failures),
    )


def _new_tuner(spec: Spec, sweep_dir: Path, plan: Plan, *, verbose: bool, stream):
    import optuna
    from ray import tune

    from hpsearch.cluster import uses_worker_group
    from hpsearch.translate import make_scheduler, make_searcher
    from hpsearch.trial import make_trainable

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(optuna_storage_url(sweep_dir))
    from hpsearch.callbacks import may_start_trial

    searcher = make_searcher(
        spec, storage=storage, study_name=sweep_dir.name,
        may_start=functools.partial(may_start_trial, str(sweep_dir), spec.trials.num),
    )
    run = _Run(spec, sweep_dir, verbose=verbose, stream=stream, resume=False)
    tuner = tune.Tuner(
        make_trainable(spec, sweep_dir=str(sweep_dir)),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=make_scheduler(spec),
            num_samples=spec.trials.num,
            max_concurrent_trials=plan.slots,
            time_budget_s=spec.budget.time_s,
            # In-process trials can reuse the previous trial's actor: no new process, no
            # second torch import (~1.5 s a trial on 2 cores). Train trials can't: each
            # TorchTrainer builds its own worker group.
            reuse_actors=not uses_worker_group(spec),
        ),
        run_config=_run_config(spec, sweep_dir, run),
    )
    return tuner, run


def _fit(tuner_and_run, spec: Spec, sweep_dir: Path, plan: Plan, manifest: dict) -> SweepResult:
    from hpsearch.progress import best_trial
    from hpsearch.tables import write_tables

    tuner, run = tuner_and_run
    status = "finished"
    sentinel = _InterruptSentinel()
    try:
        with sentinel:
            tuner.fit()
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        run.progress.close()
    if sentinel.fired:
        status = "interrupted"
    else:  # the time budget or the all-failed stop ended the sweep around these trials
        run.records.stop_unfinished()
        run.tables.prune()
    try:
        write_tables(run.records, sweep_dir)
    finally:
        counts: dict[str, int] = {}
        for row in run.records.trials.values():
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        if status == "finished" and run.stopper.stop_all():
            status = "all_failed"
        if status == "finished" and not any(
            counts.get(s) for s in ("completed", "stopped_by_asha", "stopped")
        ):
            status = "no_trial_completed"
        manifest.update(status=status, ended_at=now_iso(), counts=counts)
        manifest["runs"][-1]["ended_at"] = manifest["ended_at"]
        write_manifest(sweep_dir, manifest)
    if run.tables.storage_error is not None:
        raise run.tables.storage_error
    best = best_trial(run.records, spec)
    result = SweepResult(sweep_dir, status, plan, best=best, counts=counts)
    if status in ("finished", "no_trial_completed", "all_failed"):
        from hpsearch.recovery import fail_orphaned_optuna_trials

        fail_orphaned_optuna_trials(optuna_storage_url(sweep_dir), sweep_dir.name)
    if status == "interrupted":
        raise Interrupted(
            f"interrupted: the tables in {sweep_dir} are up to date. "
            f"Continue with `hpsearch resume {sweep_dir.name} --storage {sweep_dir.parent}`."
        )
    return result


class _InterruptSentinel:
    """Detects the first Ctrl-C that Ray Tune swallows.

    Tune installs its own SIGINT handler while it runs and, on the first Ctrl-C, stops the
    run gracefully and puts back the handler it found: ours. So if ours is installed again
    after ``fit`` returns, a Ctrl-C happened. A second Ctrl-C reaches ours and raises
    KeyboardInterrupt at once.
    """

    def __init__(self) -> None:
        self.fired = False
        self._previous = None

    def _handler(self, signum, frame):  # second Ctrl-C
        self.fired = True
        raise KeyboardInterrupt

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGINT, self._handler)
        except ValueError:  # not the main thread
            self._previous = None
        return self

    def __exit__(self, *exc):
        if self._previous is None:
            return False
        tune_catches = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER", "0") in ("", "0")
        if tune_catches and signal.getsignal(signal.SIGINT) == self._handler:  # == not is
            self.fired = True
        signal.signal(signal.SIGINT, self._previous)
        return False


# --- resume ----------------------------------------------------------------------------


def resume_sweep(
    name: str, *, storage: str = "./runs", address: str | None = None,
    verbose: bool = False, stream=None,
) -> SweepResult:
    """Continue a sweep whose driver died or was interrupted.

    Finished trials are not rerun; trials that were running continue from their latest
    checkpoint; the Optuna study continues.
    """
    from ray import tune

    from hpsearch.cluster import connect
    from hpsearch.space import load_space
    from hpsearch.trial import make_trainable

    stream = stream or sys.stdout
    sweep_dir = storage_root(storage) / name
    tune_dir = sweep_dir / TUNE_DIR
    if not (sweep_dir / MANIFEST_FILE).exists():
        raise SweepNotFoundError(
            f"no sweep named {name!r} in {sweep_dir.parent}; `hpsearch ls --storage DIR` "
            "lists the sweeps there"
        )
    from hpsearch.recovery import replay_asha_rungs, stop_orphaned_local_ray

    spec = load_space(sweep_dir / SPACE_FILE)
    manifest = read_manifest(sweep_dir)
    _refuse_if_running(sweep_dir, name)
    stopped = stop_orphaned_local_ray(manifest)
    if stopped:
        print(f"stopped {len(stopped)} Ray process(es) orphaned by the killed driver",
              file=stream)
    conn = connect(address, verbose=verbose)
    try:
        if not tune.Tuner.can_restore(str(tune_dir)):
            raise SweepNotFoundError(
                f"sweep {name!r} has no Ray Tune state to resume from (it stopped before its "
                f"first trial started). Start it again with `hpsearch run --overwrite`."
            )
        plan = make_plan(spec, conn.resources)
        run = _Run(spec, sweep_dir, verbose=verbose, stream=stream, resume=True)
        tuner = tune.Tuner.restore(
            str(tune_dir),
            make_trainable(spec, sweep_dir=str(sweep_dir)),
            resume_unfinished=True,
            resume_errored=False,
            restart_errored=False,
        )
        # Restore keeps the pickled RunConfig; callbacks are ours, fresh.
        internal = tuner._local_tuner
        internal._run_config.callbacks = run.callbacks
        internal._run_config.stop = run.stopper
        internal._tune_config.max_concurrent_trials = plan.slots  # the cluster may differ now
        if spec.scheduler.type == "asha":
            replay_asha_rungs(internal._tune_config.scheduler, run.records.history, spec)
        manifest["status"] = "running"
        manifest.setdefault("runs", []).append({"command": command_line(), "started_at": now_iso()})
        _record_driver(manifest, conn)
        write_manifest(sweep_dir, manifest)
        return _fit((tuner, run), spec, sweep_dir, plan, manifest)
    finally:
        if conn.started_local:
            conn.close()


def list_sweeps(storage: str | os.PathLike = "./runs") -> list[dict[str, Any]]:
    """One summary dict per sweep directory under ``storage`` (newest first)."""
    import pandas as pd

    root = storage_root(storage)
    rows = []
    for manifest_path in sorted(root.glob(f"*/{MANIFEST_FILE}")):
        sweep_dir = manifest_path.parent
        try:
            manifest = read_manifest(sweep_dir)
        except (OSError, ValueError):
            continue
        try:
            raw = yaml.safe_load((sweep_dir / SPACE_FILE).read_text())
            spec_num = (raw.get("trials") or {}).get("num") or Trials().num
        except Exception:  # noqa: BLE001 - a listing must not die on one odd directory
            spec_num = "?"
        ended, best = 0, None
        if (sweep_dir / "trials.parquet").exists():
            df = pd.read_parquet(sweep_dir / "trials.parquet")
            ended = int((~df["status"].isin(["running", "pending"])).sum())
            values = df["best_value"].dropna()
            if len(values):
                mode = manifest.get("objective", {}).get("mode", "min")
                best = values.min() if mode == "min" else values.max()
        metric = manifest.get("objective", {}).get("metric", "")
        status = manifest.get("status", "?")
        if status == "running":
            from hpsearch.recovery import _same_machine, driver_alive

            last = (manifest.get("runs") or [{}])[-1]
            if _same_machine(last) and not driver_alive(manifest):
                status = "died (resume it)"
        rows.append({
            "name": sweep_dir.name,
            "status": status,
            "trials": f"{ended}/{spec_num}",
            "best": f"{metric} {best:.4g}" if best is not None else "-",
            "started_at": manifest.get("started_at"),
        })
    return sorted(rows, key=lambda r: r["started_at"] or "", reverse=True)
