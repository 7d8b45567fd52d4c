"""Every private Ray access and every repair a resumed sweep needs, in one place.

``Tuner.restore`` brings back Tune's trials and the searcher, but not everything a sweep
relies on. What hpsearch puts back, and where it reaches into Ray's internals to do so:

============================  ==========================================================
:func:`restore_tuner`         the restored Tuner gets this run's callbacks, stopper and
                              slot count (private: ``Tuner._local_tuner``)
:func:`reopen_search`         a search Tune saved as finished, so a resume can extend it
                              (private: Tune's ``search_gen_state-*.json``)
:func:`replay_asha_rungs`     ASHA's rung records, which restore rebuilds empty
                              (ray-project/ray#30838) (private: ``_brackets``)
:func:`recorded_end`          a trial that ended after Tune's last state save replays its
                              recorded result instead of training again
:func:`settle_study`          at a sweep's end, every Optuna trial still ``RUNNING`` told
                              as its trial ended, and a row for every trial the study
                              has (no phantom trials)
:func:`reap_orphan_placement_groups`  placement groups a dead Ray Train controller left
                              holding resources (private: the GCS placement-group table)
:func:`release_idle_actors`   actors Tune keeps for reuse while the sweep waits for its
                              share of a shared cluster (private: ``TuneController``)
:func:`gcs_auth_problem`      a cluster that refuses this client's token, found at once
                              (private: ``ray._raylet.GcsClient``)
:func:`running_local_cluster`  whether Ray's record of a ``ray start`` cluster is live
                              (private: ``ray._private.utils``)
:func:`local_ray_processes`,  a killed driver's orphaned local Ray instance
:func:`stop_orphaned_local_ray`  (private: ``ray._private.worker``)
============================  ==========================================================

Each private access goes through :func:`_internal`, which names the Ray versions it was
tested on (:data:`TESTED_RAY`) in a clear error if a newer Ray moved it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Mapping

from hpsearch.errors import HpsearchError
from hpsearch.space.spec import Spec
from hpsearch.store import procs
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir, write_atomic
from hpsearch.store.manifest import last_run

__all__ = ["TESTED_RAY", "local_ray_processes", "reap_orphan_placement_groups",
           "recorded_end", "reopen_search", "replay_asha_rungs", "restore_tuner",
           "gcs_auth_problem", "release_idle_actors", "running_local_cluster",
           "restored_scheduler", "settle_study",
           "stop_orphaned_local_ray"]

#: Ray versions (major.minor) whose internals the repairs below were tested against.
TESTED_RAY = ("2.60",)


class RayInternalsChanged(HpsearchError):
    """A repair needs a Ray internal that this Ray version does not have."""

    exit_code = 2


def _internal(obj: Any, path: str, *, what: str) -> Any:
    """``obj.<path>`` for a dotted private attribute path, or a clear error naming the
    Ray versions the repair ``what`` was tested on."""
    try:
        for part in path.split("."):
            obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
        return obj
    except (AttributeError, IndexError, KeyError, TypeError):
        import ray

        raise RayInternalsChanged(
            f"{what} needs Ray's internal `{path}`, which Ray {ray.__version__} does not have "
            f"(hpsearch was tested with Ray {', '.join(TESTED_RAY)}). Install a tested Ray "
            "version (pip install 'ray[default,tune,train]==2.60.*') or a newer hpsearch."
        ) from None


# --- restore -------------------------------------------------------------------------------


def restore_tuner(sweep: SweepDir, trainable: Any, *, callbacks: list, stopper: Any,
                  max_concurrent: int, time_budget_s: float | None) -> Any:
    """``Tuner.restore`` of the sweep's Tune state, with this run's callbacks, stopper,
    slot count and time budget (the pickled ones belong to the last driver; the cluster,
    the budget and the deadline may differ now). A search Tune saved as finished is
    reopened, so that a resume can extend a sweep (:func:`reopen_search`).

    Raises:
        HpsearchError: The state was written by an hpsearch whose modules moved since.
    """
    from ray import tune

    reopen_search(sweep)
    try:
        tuner = tune.Tuner.restore(os.fspath(sweep.tune), trainable, resume_unfinished=True,
                                   resume_errored=False, restart_errored=False)
    except (ModuleNotFoundError, AttributeError) as exc:
        raise HpsearchError(
            f"sweep {sweep.name!r} was saved by an older hpsearch and cannot be resumed by "
            f"this one ({type(exc).__name__}: {exc}). Its tables are intact and readable; "
            "start a new sweep, or resume it with the hpsearch version that started it."
        ) from None
    internal = _internal(tuner, "_local_tuner", what="resume")
    run_config = _internal(internal, "_run_config", what="resume")
    tune_config = _internal(internal, "_tune_config", what="resume")
    run_config.callbacks = callbacks
    run_config.stop = stopper
    tune_config.max_concurrent_trials = max_concurrent
    tune_config.time_budget_s = time_budget_s
    scheduler = getattr(tune_config, "scheduler", None)
    if hasattr(scheduler, "sweep"):
        scheduler.sweep = str(sweep)  # where the sweep is now
    _relink_searcher(tune_config.search_alg, sweep)
    return tuner


def _relink_searcher(searcher: Any, sweep: SweepDir) -> None:
    """Point the restored searcher at the sweep as it is now: its directory (it may have
    moved; the study is reopened there) and, for a searcher pickled by an older hpsearch,
    the spec it needs to tell trials apart."""
    from hpsearch.driver.searcher import SweepSearcher

    if not isinstance(searcher, SweepSearcher):
        return
    searcher.sweep = str(sweep)
    if searcher.spec is None:
        from hpsearch.space import load_space

        searcher.spec = load_space(sweep.space)


def reopen_search(sweep: SweepDir) -> bool:
    """Mark Tune's saved search state unfinished. Returns whether it was finished.

    When the searcher stops the search (all planned trials started, or the deadline),
    Tune's ``SearchGenerator`` saves ``finished`` and a restored experiment never asks for
    another trial. hpsearch decides itself what may start (:mod:`hpsearch.driver.budget`),
    so a resumed sweep reopens the search and the new limits apply. The state file is
    Ray's private format (``search_gen_state-*.json``, a cloudpickle).
    """
    import glob

    import ray.cloudpickle as cloudpickle
    from ray.tune.search.search_generator import SearchGenerator

    pattern = _internal(SearchGenerator, "CKPT_FILE_TMPL", what="resume").format("*")
    found = sorted(glob.glob(os.path.join(sweep.tune, pattern)))
    if not found:
        return False
    newest = found[-1]  # Ray orders these by name, as _load_newest_checkpoint does
    with open(newest, "rb") as f:
        state = cloudpickle.load(f)
    if not isinstance(state, dict) or "finished" not in state:
        _internal(state, "finished", what="reopening the search on resume")
    if not state["finished"]:
        return False
    state["finished"] = False
    write_atomic(Path(newest), lambda tmp: tmp.write_bytes(cloudpickle.dumps(state)))
    return True


def restored_scheduler(tuner: Any) -> Any:
    """The scheduler a restored Tuner will run with."""
    return _internal(tuner, "_local_tuner._tune_config.scheduler", what="resume")


def replay_asha_rungs(scheduler: Any, history: Iterable[Mapping[str, Any]], spec: Spec) -> int:
    """Feed every recorded report to ``scheduler``'s brackets as ASHA saw it.

    Rung records depend only on each trial's own reports (the value at the first report at
    or past each milestone), not on the order trials arrived in, so replaying the history
    table rebuilds exactly the records the original run had. Returns the number of reports
    replayed.
    """
    metric, time_attr = spec.objective.metric, spec.scheduler.result_key
    # ASHA keeps scores as "higher is better" (it negates for mode min).
    op = -float(spec.objective.sign)
    by_trial: dict[str, list[Mapping[str, Any]]] = {}
    for row in history:
        by_trial.setdefault(row["trial_id"], []).append(row)
    bracket = _internal(scheduler, "_brackets.0", what="replaying ASHA's rungs on resume")
    replayed = 0
    for trial_id, rows in by_trial.items():
        trial = SimpleNamespace(trial_id=trial_id)
        for row in sorted(rows, key=lambda r: r.get("step") or 0):
            if row.get("evaluated") is False:  # a log_every row: ASHA never saw it
                continue
            t, value = row.get(time_attr), row.get(metric)
            if _missing(t) or _missing(value):
                continue
            bracket.on_result(trial, t, op * float(value))
            replayed += 1
    return replayed


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def recorded_end(sweep: SweepDir, trial_id: str) -> dict[str, Any] | None:
    """The last report of a trial the trial table says has ended, else ``None``.

    Tune saves its experiment state only now and then. After a driver crash it may hold a
    trial as unfinished that had in fact ended (and whose row and history are on disk);
    such a trial replays its last report instead of training again.
    """
    if not sweep.trials.exists():
        return None
    import pandas as pd

    trials = pd.read_parquet(sweep.trials, columns=["trial_id", "status"])
    status = trials.loc[trials.trial_id == trial_id, "status"]
    if status.empty or status.iloc[0] not in st.ENDED:
        return None
    history = pd.read_parquet(sweep.history)
    rows = history[history.trial_id == trial_id]
    if "evaluated" in rows:  # the last report, not a log_every row after it
        rows = rows[rows.evaluated.fillna(True).astype(bool)]
    if rows.empty:
        return None
    last = rows.iloc[-1].dropna().to_dict()
    last.pop("trial_id", None)
    return last


# --- Optuna ---------------------------------------------------------------------------------


def may_start_trial(sweep: str, num: int | None = None, *,
                    trial_id: str | None = None) -> bool | None:
    """Where sweeps started before :mod:`hpsearch.driver.budget` existed look for their
    searcher's ``may_start`` hook (Tune pickled it by this name); the same decision."""
    from hpsearch.driver.budget import may_start_trial as decide

    return decide(sweep, num, trial_id=trial_id)



def settle_study(sweep: SweepDir, records: Any) -> dict[int, str]:
    """Make the study and the trial table agree at the end of a sweep; returns the Optuna
    trials told here (number -> state name).

    Call it when the sweep has ended for good (finished, time budget, deadline, all-failed
    stop, stall), not when it was interrupted: a resume continues those trials. Tune tells
    the searcher nothing about trials it stops to end the sweep, so each Optuna trial still
    ``RUNNING`` is told as its row ended (:func:`~hpsearch.driver.searcher.study_outcome`:
    ``stopped`` with reports is ``PRUNED``, without is ``FAIL``). A trial that was proposed
    but never started (the sweep ended first) gets a ``stopped`` row, so the trial table
    lists every trial the study holds. A running trial of an older sweep, without a
    ``trial_id`` attribute, is ``FAIL`` as before.
    """
    import optuna

    from hpsearch.driver.searcher import load_sweep_study, study_outcome

    study = load_sweep_study(sweep)
    if study is None:
        return {}
    told: dict[int, str] = {}
    running = optuna.trial.TrialState.RUNNING
    for ft in study.get_trials(deepcopy=False):
        trial_id = ft.user_attrs.get("trial_id")
        if trial_id is None:
            if ft.state == running:
                study.tell(ft.number, state=optuna.trial.TrialState.FAIL)
                told[ft.number] = "FAIL"
            continue
        if trial_id not in records.trials:
            records.add_without_reports(trial_id, ft.params, optuna_trial=ft.number)
        else:
            records.link_optuna(trial_id, ft.number)
        if ft.state != running:
            continue
        row = records.trials[trial_id]
        status = row.get("status")
        if status not in st.ENDED:
            status = st.STOPPED
        state, value = study_outcome(status, value=row.get("final_value"),
                                     has_reports=bool(ft.intermediate_values))
        study._storage.set_trial_user_attr(ft._trial_id, "status", status)
        study.tell(ft.number, value, state=state, skip_if_finished=True)
        told[ft.number] = state.name
    return told


# --- placement groups a dead Ray Train controller left behind --------------------------------


def reap_orphan_placement_groups() -> list[str]:
    """Remove this sweep's placement groups whose Ray Train controller is dead.

    Ray removes a placement group only when both the actor that created it and its job
    (this sweep's driver) are dead, and Ray Train's own ``PlacementGroupCleaner`` sees a
    group only after its worker group started, and only with a reachable dashboard. So a
    trial whose worker group failed during setup (a process group that cannot start),
    or that Tune stopped without a working cleaner, leaves a group that holds its CPUs and
    GPUs for the rest of the sweep, and the next trials wait for them forever.

    An orphan here: not removed, not detached, created by a real actor (Tune's own groups
    have a nil creator) that is dead, in this driver's job. Returns the ids removed.
    (private: the GCS placement-group table, for the creator fields)
    """
    import ray
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    state = _internal(__import__("ray._private.state", fromlist=["state"]), "state",
                      what="removing orphaned placement groups")
    from ray.core.generated import gcs_pb2

    table = gcs_pb2.PlacementGroupTableData
    nil = ray.ActorID.nil().binary()
    job = ray.get_runtime_context().get_job_id()
    removed = []
    accessor = _internal(state, "_connect_and_get_accessor",
                         what="removing orphaned placement groups")()
    for raw in accessor.get_placement_group_table():
        group = table.FromString(raw)
        if (group.state != table.REMOVED and not group.is_detached
                and group.creator_actor_id and group.creator_actor_id != nil
                and group.creator_actor_dead and not group.creator_job_dead
                and group.creator_job_id.hex() == job):
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(group.placement_group_id)))
            removed.append(group.placement_group_id.hex())
    return removed


# --- idle reused actors on a shared cluster ---------------------------------------------------


def release_idle_actors(tune_controller: Any) -> None:
    """Stop the actors Tune keeps for reuse (``reuse_actors``) that no trial uses now.

    Tune keeps one such actor even when no trial is coming; on a shared cluster it would
    hold its resources from the other sweeps while this one waits for its share.
    (private: ``TuneController._cleanup_cached_actors``)
    """
    _internal(tune_controller, "_cleanup_cached_actors",
              what="giving a shared cluster's slots back")(force_all=True)


# --- token authentication, before a long connect ----------------------------------------------


def gcs_auth_problem(address: str) -> str | None:
    """The GCS's answer if it refuses this client's token, else ``None``; in milliseconds.

    ``ray.init`` against a cluster that requires a token this client lacks retries for
    about 20 s and then says only that it failed to connect; the GCS client raises an
    ``AuthenticationError`` at once. (private: ``ray._raylet.GcsClient``)
    """
    raylet = __import__("ray._raylet", fromlist=["GcsClient"])
    client_cls = _internal(raylet, "GcsClient", what="checking the cluster's token")
    auth_error = getattr(__import__("ray.exceptions", fromlist=["x"]), "AuthenticationError",
                         None)
    try:
        client_cls(address=address)
    except Exception as exc:  # noqa: BLE001 - only an authentication refusal is reported
        if (auth_error is not None and isinstance(exc, auth_error)) or "InvalidAuthToken" in str(exc):
            return str(exc).splitlines()[0]
    return None


# --- a `ray start` cluster on this machine ------------------------------------------------------


def running_local_cluster() -> str | None:
    """The address of a Ray cluster started on this machine with ``ray start``, if one is
    running now; ``None`` if there is none or Ray's record of it is stale.

    ``ray.init()`` without an address joins the cluster Ray recorded in its temp
    directory, and retries for minutes when that cluster is gone (a ``ray start --block``
    that was killed leaves the record). (private: ``ray._private.utils.read_ray_address``)
    """
    import socket

    utils = __import__("ray._private.utils", fromlist=["read_ray_address"])
    try:
        address = _internal(utils, "read_ray_address", what="connecting")()
    except OSError:
        return None
    if not address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return address
    except (OSError, ValueError):
        return None


# --- a killed driver's local Ray --------------------------------------------------------------


def local_ray_processes() -> list[dict[str, int]]:
    """The Ray daemons this driver's local instance started and their agents, identified
    by pid and start time."""
    try:
        import ray._private.worker as worker
    except ImportError:
        return []
    node = getattr(worker, "_global_node", None)
    if node is None:
        return []
    pids = []
    for infos in _internal(node, "all_processes", what="recording the local Ray").values():
        for info in infos:
            if info.process is not None:
                pids.append(info.process.pid)
    daemons = [p for p in (procs.identify(pid) for pid in pids) if p]
    # The raylet's agents (dashboard, runtime env) outlive a killed driver's daemons.
    return daemons + procs.descendants(pids)


def stop_orphaned_local_ray(manifest: Mapping[str, Any], *, grace_s: float = 10.0) -> list[int]:
    """Stop the local Ray instance of a sweep whose driver was killed.

    The manifest records the driver and the local Ray processes it started, each by pid
    and start time. If that driver is gone and this is the same machine since the same
    boot, the recorded processes that still match exactly, and their descendants (each
    checked the same way), are orphans: SIGTERM, then SIGKILL after ``grace_s``. A pid
    reused by another process, another user's Ray, or anything on another machine is never
    touched. Returns the pids stopped.
    """
    run = last_run(manifest)
    recorded = [p for p in run.get("local_ray") or [] if isinstance(p, Mapping)]
    if not recorded or not procs.same_machine(run) or procs.matches(run.get("driver")):
        return []
    alive = [dict(p) for p in recorded if procs.matches(p)]
    alive += [p for p in procs.descendants([p["pid"] for p in alive])
              if p["pid"] not in {a["pid"] for a in alive}]
    return procs.terminate(alive, grace_s=grace_s)
