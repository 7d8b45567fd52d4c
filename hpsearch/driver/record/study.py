"""The sweep's Optuna study: where it lives, how it is written, what it says.

The study journal and the trial tables are a sweep's record: every trial hpsearch starts
is an Optuna trial first (its ``trial_id`` user attribute is the trial's hpsearch id,
``optuna_trial`` in ``trials.parquet`` the way back), and a trial has ended when the
study says so. What the study says about each trial, by its status in the trial table:

* **Reports.** Every report with a finite objective is an intermediate value at its
  *study step* (:func:`study_step`): ``floor`` of its ``scheduler.time_attr`` value, except
  that the first report at or past each ASHA milestone is stored at the milestone itself,
  the value ASHA compared there. Steps only grow.
* **Outcome** (:func:`study_outcome`): ``completed`` is ``COMPLETE`` with the last
  reported value; ``stopped_by_asha`` and ``stopped`` are ``PRUNED``; ``diverged``,
  ``unsupported_precision`` and ``failed`` are ``FAIL``, which TPE ignores. Each ended
  trial carries a ``status`` user attribute.

The journal is Optuna's own file format (:class:`SweepJournal`): ``optuna.load_study``
and ``optuna-dashboard`` read it as they read any journal file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import optuna
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState

from hpsearch.driver.record.objectives import reported
from hpsearch.errors import DamagedSweepError
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir

__all__ = ["STUDY_STATE", "RecordedTrial", "SweepJournal", "check_sweep_study",
           "load_sweep_study", "open_study", "recorded_trials", "status_of", "study_outcome",
           "study_step"]

#: The study state of a trial, by its status in ``trials.parquet``. A ``stopped`` trial
#: with no intermediate value is ``FAIL`` instead: it never reported.
STUDY_STATE: Mapping[str, TrialState] = MappingProxyType({
    st.COMPLETED: TrialState.COMPLETE,
    st.STOPPED_BY_ASHA: TrialState.PRUNED,
    st.STOPPED: TrialState.PRUNED,
    st.DIVERGED: TrialState.FAIL,
    st.UNSUPPORTED_PRECISION: TrialState.FAIL,
    st.FAILED: TrialState.FAIL,
})


def study_step(t: float, milestones: Sequence[float], reported: Iterable[int]) -> int:
    """The study step of a report at ``t`` (in ``scheduler.time_attr`` units).

    ``floor(t)``, except for the first report at or past a milestone ``m`` (an ASHA rung or
    ``max_t``; ``reported`` holds no step ``>= m`` yet), which is stored at ``m``: ASHA
    compares trials on that report. With reports at epoch ends this is simply the epoch.

    Example:
        >>> study_step(1.0, (1, 3, 9), [])         # epoch 1, first past rung 1
        1
        >>> study_step(17.4, (10, 30, 90), [0, 5])  # seconds: the first report past rung 10
        10
        >>> study_step(21.9, (10, 30, 90), [0, 5, 10])
        21
    """
    reported = list(reported)
    passed = [m for m in milestones if m <= t + 1e-9]
    if passed:
        m = max(passed)
        if not any(k >= m for k in reported):
            return int(m)
    return int(math.floor(t + 1e-9))


def study_outcome(status: str, *, value: Any,
                  has_reports: bool) -> tuple[TrialState, float | list[float] | None]:
    """The state and value to tell Optuna for a trial that ended with ``status``.

    ``value`` is the last report's value of the objective, or a sequence of one value per
    objective in a study of several. ``COMPLETE`` needs every value finite, and is told
    them as floats (a list for a sequence); Optuna takes the last intermediate value of a
    ``PRUNED`` trial itself. A ``stopped`` trial that never reported, and a ``completed``
    one with a value missing or not finite, are ``FAIL``.

    Example:
        >>> study_outcome("completed", value=[0.5, 1e4], has_reports=True)
        (<TrialState.COMPLETE: 1>, [0.5, 10000.0])
        >>> study_outcome("completed", value=[0.5, None], has_reports=True)
        (<TrialState.FAIL: 3>, None)
    """
    state = STUDY_STATE.get(status, TrialState.FAIL)
    if state == TrialState.COMPLETE:
        several = isinstance(value, (list, tuple))
        try:
            values = [float(v) for v in (value if several else [value])]
        except (TypeError, ValueError):
            return TrialState.FAIL, None
        if not values or not all(math.isfinite(v) for v in values):
            return TrialState.FAIL, None
        return TrialState.COMPLETE, values if several else values[0]
    if state == TrialState.PRUNED and not has_reports:
        return TrialState.FAIL, None
    return state, None


def status_of(trial: "RecordedTrial") -> str:
    """The table status of an ended trial of the study (its ``status`` attribute; sweeps
    of older hpsearch versions may lack it)."""
    if trial.status in st.ENDED:
        return trial.status
    return {"COMPLETE": st.COMPLETED, "PRUNED": st.STOPPED}.get(trial.state.name, st.FAILED)


class SweepJournal(JournalFileBackend):
    """Optuna's journal file, flushed to disk where the sweep says, not at every append.

    Optuna's backend ``fsync``s each operation: about 8 per trial (its creation, each
    parameter and intermediate value, its attributes, its end), most of the journal's
    cost in a sweep of short trials and far more on network storage. Here every append
    still reaches the file before the call returns (another process, or this driver
    killed, sees it), and :meth:`sync` flushes it to disk: the record syncs it when a
    trial ends, and before each write of the tables, so a power cut loses no ended
    trial and the tables never name a trial the journal could lose. The lock is Optuna's
    symlink lock, which works on NFS and is what ``optuna-dashboard`` uses.
    """

    def __init__(self, file_path: str):
        self._sweep_lock = JournalFileSymlinkLock(file_path)
        self._sweep_path = file_path
        super().__init__(file_path, lock_obj=self._sweep_lock)
        self.syncs = 0

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append whole lines or nothing: a write the disk cannot take (full, over quota)
        is cut off again before the error is raised, so no reader, and no later append,
        ever meets half a line."""
        import json

        data = memoryview("".join(json.dumps(log, separators=(",", ":")) + "\n"
                                  for log in logs).encode("utf-8"))
        self._sweep_lock.acquire()
        try:
            fd = os.open(self._sweep_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                start = os.fstat(fd).st_size  # the lock keeps other writers out
                try:
                    while data:
                        data = data[os.write(fd, data):]
                except OSError:
                    os.ftruncate(fd, start)
                    raise
            finally:
                os.close(fd)
        finally:
            self._sweep_lock.release()

    def drop_partial_line(self) -> int:
        """Cut a last line that lacks its newline (an append the disk took only part of
        before an older hpsearch, or a power cut, stopped it); returns the bytes cut. Only
        a sweep's own driver calls it, before its first append."""
        size = os.path.getsize(self._sweep_path) if os.path.exists(self._sweep_path) else 0
        if size == 0:
            return 0
        with open(self._sweep_path, "rb+") as f:
            f.seek(max(0, size - 1))
            if f.read(1) == b"\n":
                return 0
            f.seek(0)
            keep = f.read().rfind(b"\n") + 1
            f.truncate(keep)
            os.fsync(f.fileno())
        return size - keep

    def sync(self) -> None:
        """Flush every append so far to the disk."""
        fd = os.open(self._sweep_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.syncs += 1


def open_study(sweep: SweepDir, *, direction: str = "minimize", sampler=None,
               create: bool = True, directions: Sequence[str] | None = None,
               ) -> tuple[optuna.Study | None, SweepJournal | None]:
    """The sweep's study and its journal (to :meth:`~SweepJournal.sync`).

    The study is the only one in the file, named after the sweep when it started. A new
    sweep's is created with ``create``, with ``directions`` (one per objective) when given,
    else ``direction``; otherwise a sweep without one gives ``None``.
    Sweeps of older hpsearch versions keep their study in SQLite (``optuna.db``): their
    journal is ``None``, and SQLite writes each operation through itself.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    journal = None
    if not sweep.optuna.exists() and sweep.optuna_sqlite.exists():
        storage: Any = optuna.storages.RDBStorage(sweep.optuna_sqlite_url)
    elif sweep.optuna.exists() or create:
        journal = SweepJournal(str(sweep.optuna))
        if create:  # the sweep's driver, about to write: no reader ever cuts
            journal.drop_partial_line()
        storage = optuna.storages.JournalStorage(journal)
    else:
        return None, None
    names = optuna.get_all_study_names(storage)
    if names:
        name = sweep.name if sweep.name in names else names[0]
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler), journal
    if not create:
        return None, journal
    how = {"directions": list(directions)} if directions else {"direction": direction}
    study = optuna.create_study(study_name=sweep.name, storage=storage, sampler=sampler, **how)
    journal.sync()
    return study, journal


def load_sweep_study(sweep: SweepDir) -> optuna.Study | None:
    """The sweep's study as it is on disk, or ``None`` when it has none."""
    return open_study(sweep, create=False)[0]


def check_sweep_study(sweep: SweepDir, linked: Iterable[int]) -> optuna.Study | None:
    """The sweep's study, checked before a resume changes anything: it can be read and
    holds every Optuna trial the trial table links to (``linked``: its ``optuna_trial``
    numbers). A garbled or truncated journal otherwise reads as an empty study, and the
    resume would carry on with a search that knows nothing.

    Raises:
        DamagedSweepError: The study file is missing, unreadable or short of trials.
    """
    linked = set(linked)
    path = sweep.optuna if sweep.optuna.exists() or not sweep.optuna_sqlite.exists() \
        else sweep.optuna_sqlite
    problem, study = None, None
    if not path.exists():
        problem = "it is missing" if linked else None
    else:
        try:
            study = load_sweep_study(sweep)
        except Exception as exc:  # noqa: BLE001 - any reader error means the same here
            problem = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        else:
            held = set() if study is None else {t.number for t in study.get_trials(deepcopy=False)}
            if study is None:
                # None yet is fine only if the disk filled before its first line was whole.
                empty = path == sweep.optuna and b"\n" not in path.read_bytes()
                problem = None if empty and not linked else "it holds no study"
            elif linked - held:
                problem = (f"it holds {len(held)} trial(s) but the trial table links "
                           f"{len(linked)}")
    if problem is not None:
        raise DamagedSweepError(
            f"{path.name} of sweep {sweep.name!r} cannot be used ({problem}); nothing was "
            f"changed. The tables are intact: start a new sweep that learns from this one "
            f"(`hpsearch run SPACE --warm-start {sweep.name}`), or restore {path.name} from "
            "a backup and resume again.")
    return study


@dataclass(frozen=True)
class RecordedTrial:
    """One of the sweep's own trials as its study records it.

    Attributes:
        trial_id: Its hpsearch id (the ``trial_id`` user attribute).
        number: Its Optuna trial number.
        state: Optuna's state: ``RUNNING`` means it has not ended.
        status: The trial-table status it ended with (``None`` while running).
        params: Its sampled parameters.
        value: Its value, when ``COMPLETE`` (a tuple in a study of several objectives).
        intermediate: ``{study step: value}`` of its reports (a tuple of values, one per
            objective, in a study of several: :func:`~hpsearch.driver.record.objectives.reported`).
    """

    trial_id: str
    number: int
    state: TrialState
    status: str | None
    params: Mapping[str, Any]
    value: float | None = None
    intermediate: Mapping[int, float] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.state.is_finished()


def _value(trial: Any) -> Any:
    """A ``COMPLETE`` trial's value (a tuple of them in a study of several objectives)."""
    if trial.state != TrialState.COMPLETE or not trial.values:
        return None
    return trial.values[0] if len(trial.values) == 1 else tuple(trial.values)


def recorded_trials(study: optuna.Study) -> list[RecordedTrial]:
    """The sweep's own trials in ``study``, in their order: those hpsearch started (with a
    ``trial_id``), not those a warm start imported or enqueued."""
    out = []
    for t in study.get_trials(deepcopy=False):
        trial_id = t.user_attrs.get("trial_id")
        if trial_id is None or t.state == TrialState.WAITING:
            continue
        out.append(RecordedTrial(
            trial_id=trial_id, number=t.number, state=t.state,
            status=t.user_attrs.get("status") if t.state.is_finished() else None,
            params=dict(t.params), value=_value(t), intermediate=reported(t)))
    return out
