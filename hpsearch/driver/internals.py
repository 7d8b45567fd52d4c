"""Every private Ray and Optuna access hpsearch makes, in one guarded module.

Everything else in hpsearch talks to Ray and Optuna through their public APIs. What is
left here has no public form:

==================================  ====================================================
:func:`reap_orphan_placement_groups`  placement groups a dead Ray Train controller left
                                    holding resources (the GCS placement-group table,
                                    for its creator fields)
:func:`gcs_auth_problem`            a cluster that refuses this client's token, found in
                                    milliseconds (``ray._raylet.GcsClient``)
:func:`running_local_cluster`       the ``ray start`` cluster on this machine that
                                    ``ray.init()`` would join (``ray._private.utils``)
:func:`local_ray_processes`         the daemons of the local instance this driver started,
                                    so a resume can stop a killed driver's orphans
                                    (``ray._private.worker``)
:func:`reopen_trial`                the ``optuna.Trial`` of a running trial a resumed
                                    sweep continues (``Study._storage``, ``_study_id``)
:func:`trial_stop_event`            the event Tune sets when it stops the function
                                    trial this thread runs, so a command trial ends its
                                    command at once (``ray.train._internal.session``)
:func:`raylet_messages_to`          the messages the raylet publishes to the driver
                                    (worker start-up warnings), which Ray prints from a
                                    thread of its own even with ``log_to_driver=False``
                                    (``ray._private.worker.print_to_stdstream``)
:func:`qmc_conditions_quiet`        QMCSampler's warning that a conditional space has
                                    conditions, on its module's logger
                                    (``optuna.samplers._qmc``)
==================================  ====================================================

Each access goes through :func:`internal`, which raises one clear line naming the
versions hpsearch was tested with when an attribute has moved; :func:`version_note` says
in one line when the installed Ray or Optuna is outside those versions.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, Iterator

from hpsearch.errors import HpsearchError

__all__ = ["TESTED_OPTUNA", "TESTED_RAY", "InternalsChanged", "gcs_auth_problem", "internal",
           "local_ray_processes", "quiet_token_notice", "raylet_messages_to",
           "reap_orphan_placement_groups", "is_orphan_group",
           "reopen_trial", "running_local_cluster", "trial_stop_event", "version_note"]

logger = logging.getLogger(__name__)

#: The Ray and Optuna versions (major.minor) whose internals this module was tested with.
TESTED_RAY = ("2.55", "2.60")
TESTED_OPTUNA = ("4.0", "5.1")


class InternalsChanged(HpsearchError):
    """A private Ray or Optuna attribute hpsearch needs is not where it was."""

    exit_code = 2


def _minor(version: str) -> tuple[int, int]:
    parts = (version.split(".") + ["0"])[:2]
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def version_note(package: str, version: str) -> str | None:
    """One line when ``version`` of ``package`` (``ray`` or ``optuna``) is outside the
    range hpsearch's internals were tested with, else ``None``.

    Example:
        >>> version_note("ray", "2.58.1") is None, version_note("ray", "2.70.0")[:26]
        (True, 'hpsearch was tested with R')
    """
    low, high = {"ray": TESTED_RAY, "optuna": TESTED_OPTUNA}[package]
    if _minor(low) <= _minor(version) <= _minor(high):
        return None
    return (f"hpsearch was tested with {package.capitalize()} {low}-{high}, not {version}: "
            f"if a sweep misbehaves, pip install '{package}=={high}.*'")


@functools.cache
def _note_untested_version(package: str) -> None:
    """Logs :func:`version_note` of the installed ``package`` once per process (the
    function's cache remembers the packages it has looked at)."""
    note = version_note(package, __import__(package).__version__)
    if note:
        logger.warning(note)


def internal(obj: Any, path: str, *, what: str, package: str = "ray") -> Any:
    """``obj.<path>`` for a dotted private path, or :class:`InternalsChanged` saying what
    needs it and which versions were tested. Notes once per process when the installed
    version is outside them."""
    module = __import__(package)
    _note_untested_version(package)
    try:
        for part in path.split("."):
            obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
        return obj
    except (AttributeError, IndexError, KeyError, TypeError):
        tested = TESTED_RAY if package == "ray" else TESTED_OPTUNA
        raise InternalsChanged(
            f"{what} needs {package.capitalize()}'s internal `{path}`, which "
            f"{package.capitalize()} {module.__version__} does not have (hpsearch was tested "
            f"with {tested[0]}-{tested[1]}). Install one of those versions or a newer hpsearch."
        ) from None


# --- placement groups a dead Ray Train controller left behind --------------------------------


def reap_orphan_placement_groups() -> list[str]:
    """Remove the placement groups a dead Ray Train controller left behind
    (:func:`is_orphan_group` says which). Returns the ids removed.

    Ray removes a placement group only when both the actor that created it and its job
    are dead, and Ray Train's own ``PlacementGroupCleaner`` sees a group only after its
    worker group started. So a trial whose worker group failed during setup leaves a group
    that holds its CPUs and GPUs for the rest of the sweep, and later trials wait for them.
    """
    import ray
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    what = "removing orphaned placement groups"
    state = internal(__import__("ray._private.state", fromlist=["state"]), "state", what=what)
    from ray.core.generated import gcs_pb2

    table = gcs_pb2.PlacementGroupTableData
    job = ray.get_runtime_context().get_job_id()
    removed = []
    for raw in internal(state, "_connect_and_get_accessor", what=what)().get_placement_group_table():
        group = table.FromString(raw)

        def creator_state() -> str | None:
            info = state.actor_table(group.creator_actor_id.hex())
            return info.get("State") if info else None

        if is_orphan_group(group, job=job, creator_state=creator_state):
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(group.placement_group_id)))
            removed.append(group.placement_group_id.hex())
    return removed


def is_orphan_group(group: Any, *, job: str, creator_state: Any) -> bool:
    """Whether ``group`` (a ``PlacementGroupTableData``) is garbage nobody will remove:
    not removed, not detached, created by a real actor (Tune's own groups have a nil
    creator), and either

    * in this driver's job (``job``, hex), its creator dead: a Ray Train controller that
      died during its worker group's setup; or
    * in a job that has ended, its creator dead in the actor table (``creator_state()``,
      asked only then) though the group's own record says it lives. Ray's GCS then never
      removes the group: seen once in a clean-clone run, a finished sweep's two-CPU group
      of a ``TrainController`` killed as its trial's group went, which left the next sweep
      on that cluster waiting for CPUs for good. A live creator (a detached actor of
      another tenant, such as Ray Serve's) keeps its groups.
    """
    import ray
    from ray.core.generated import gcs_pb2

    table = gcs_pb2.PlacementGroupTableData
    if (group.state == table.REMOVED or group.is_detached or not group.creator_actor_id
            or group.creator_actor_id == ray.ActorID.nil().binary()):
        return False
    if group.creator_job_id.hex() == job and not group.creator_job_dead:
        return group.creator_actor_dead
    return group.creator_job_dead and creator_state() == "DEAD"


# --- connecting ---------------------------------------------------------------------------------


def gcs_auth_problem(address: str) -> str | None:
    """The GCS's answer if it refuses this client's token, else ``None``; in milliseconds.

    ``ray.init`` against a cluster that requires a token this client lacks retries for
    about 20 s and then says only that it failed to connect; the GCS client raises an
    ``AuthenticationError`` at once."""
    raylet = __import__("ray._raylet", fromlist=["GcsClient"])
    client_cls = internal(raylet, "GcsClient", what="checking the cluster's token")
    auth_error = getattr(__import__("ray.exceptions", fromlist=["x"]), "AuthenticationError",
                         None)
    try:
        client_cls(address=address)
    except Exception as exc:  # noqa: BLE001 - only an authentication refusal is reported
        if (auth_error is not None and isinstance(exc, auth_error)) or "InvalidAuthToken" in str(exc):
            return str(exc).splitlines()[0]
    return None


def running_local_cluster() -> str | None:
    """The address of a Ray cluster started on this machine with ``ray start``, if one is
    running now; ``None`` if there is none or Ray's record of it is stale.

    ``ray.init()`` without an address joins the cluster Ray recorded in its temp
    directory, and retries for minutes when that cluster is gone (a ``ray start --block``
    that was killed leaves the record)."""
    import socket

    utils = __import__("ray._private.utils", fromlist=["read_ray_address"])
    try:
        address = internal(utils, "read_ray_address", what="connecting")()
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


def local_ray_processes() -> list[dict[str, int]]:
    """The Ray daemons this driver's local instance started and their agents, identified
    by pid and start time (:mod:`hpsearch.store.procs`)."""
    from hpsearch.store import procs

    try:
        import ray._private.worker as worker
    except ImportError:
        return []
    node = getattr(worker, "_global_node", None)
    if node is None:
        return []
    pids = []
    for infos in internal(node, "all_processes", what="recording the local Ray").values():
        for info in infos:
            if info.process is not None:
                pids.append(info.process.pid)
    daemons = [p for p in (procs.identify(pid) for pid in pids) if p]
    # The raylet's agents (dashboard, runtime env) outlive a killed driver's daemons.
    return daemons + procs.descendants(pids)


# --- Optuna ------------------------------------------------------------------------------------


def reopen_trial(study: Any, number: int) -> Any:
    """The ``optuna.Trial`` of running trial ``number``, to report to and tell.

    A resumed sweep continues its unfinished trials as the same Optuna trials (their
    parameters and reports are there); Optuna hands out ``Trial`` objects only from
    ``ask()``, which makes a new trial."""
    import optuna

    what = "continuing a trial of a resumed sweep"
    storage = internal(study, "_storage", what=what, package="optuna")
    study_id = internal(study, "_study_id", what=what, package="optuna")
    return optuna.trial.Trial(study, storage.get_trial_id_from_study_id_trial_number(
        study_id, number))


def trial_stop_event() -> Any:
    """The ``threading.Event`` Tune sets when it stops the function trial running in this
    actor (``_TrainSession.stop_event``; a reused actor's next trial gets a new one), or
    ``None`` outside a Tune trial. Tune's own check of it comes at the trial's next
    report, which a command trial makes only when its script prints one."""
    from ray.train._internal import session

    current = session.get_session()
    if current is None:
        return None
    return internal(current, "stop_event", what="ending a stopped command trial at once")


def quiet_token_notice() -> None:
    """Ray's "Token authentication is enabled for this Ray cluster" warning, printed at
    every ``ray.init`` of a local instance (its default), only at ERROR from now on."""
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR)


@contextlib.contextmanager
def raylet_messages_to(log: logging.Logger) -> Iterator[None]:
    """While inside, the messages the raylet publishes to this driver ("8 PYTHON worker
    processes have been started ...", OOM kills) go to ``log`` instead of the console.
    Ray prints them from its ``listen_error_messages`` thread through the module function
    ``print_to_stdstream``, whatever ``log_to_driver`` says; where that function is not
    there (another Ray), they are left as they are."""
    try:
        import ray._private.worker as worker
    except ImportError:
        yield
        return
    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        yield
        return

    def to_log(data: dict, *args: Any, **kwargs: Any) -> None:
        for line in data.get("lines") or []:
            log.warning("(%s) %s", data.get("pid") or "ray", line)

    worker.print_to_stdstream = to_log
    try:
        yield
    finally:
        worker.print_to_stdstream = original


class _ConditionsWarning(logging.Filter):
    """Drops QMCSampler's warning about a conditional search space; lets every other
    record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "does not include any conditions" not in record.getMessage()


@contextlib.contextmanager
def qmc_conditions_quiet() -> Iterator[None]:
    """While inside, Optuna's ``QMCSampler`` does not warn that "the search space does not
    include any conditions", which it says on every ask while no trial has ended and the
    running trials' spaces differ. The logger is its module's (``optuna.logging
    .get_logger(__name__)``); where Optuna has moved it, the warning shows, as before."""
    logger = logging.getLogger("optuna.samplers._qmc")
    quiet = _ConditionsWarning()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
