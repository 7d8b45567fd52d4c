"""The Optuna searcher as a sweep runs it: Ray Tune's ``OptunaSearch``, telling the study
what really happened to each trial.

Ray's ``OptunaSearch`` tells Optuna every trial that ended as ``COMPLETE`` with its last
value, keys reports by Tune's report count, and never reports the result that ends a trial
(Tune passes it only to ``on_trial_complete``). So trials ASHA stopped at the first rung
look like finished bad results with no curve, and TPE compares epoch-1 losses with
full-length ones. :class:`SweepSearcher` is the one place that changes this:

* **Reports.** Every report with a finite objective becomes an intermediate value at its
  *study step* (:func:`study_step`): ``floor`` of its ``scheduler.time_attr`` value, except
  that the first report at or past each ASHA milestone (rung or ``max_t``) is stored at the
  milestone itself. That is the value ASHA compared there, and every trial stopped at a
  rung then ends at the same step, which is what TPE ranks pruned trials by. Steps only
  grow: a restarted trial's repeated reports are not stored twice.
* **Outcome.** The trial table's status decides the study's state (:data:`STUDY_STATE`):
  ``completed`` is ``COMPLETE`` with the *last* reported value (``final_value``);
  ``stopped_by_asha`` and ``stopped`` are ``PRUNED`` (Optuna then takes the last
  intermediate value as the trial's value); ``diverged``, ``unsupported_precision`` and
  ``failed`` are ``FAIL``, which TPE ignores, like an objective that returns NaN in plain
  Optuna. Each trial carries user attributes ``trial_id`` and ``status``.
* **Link.** ``trial_id`` on the Optuna trial, ``optuna_trial`` in ``trials.parquet``.
* **No phantom trials after a resume.** Tune saves the searcher only now and then. An Optuna
  trial asked after the last save has no Tune trial any more: if it never reported, the next
  new Tune trial *adopts* it (same number, same parameters) instead of asking a new one; if
  it reported, the killed driver's trial is kept as ``stopped`` and the study says
  ``PRUNED``. A trial the study had already finished is not told again when Tune reruns it.

Tune pickles the searcher with the experiment and restores it with ``__dict__.update``
(``__init__`` is not rerun), so every attribute added here has a class-level default and a
searcher pickled by an older hpsearch still restores.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import optuna
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState
from ray.tune.search.optuna import OptunaSearch

from hpsearch.driver import live
from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import OBJECTIVE_MISSING, final_status

__all__ = ["STUDY_STATE", "SweepSearcher", "TrialEndSyncedJournal", "check_sweep_study",
           "load_sweep_study", "open_study_storage", "study_outcome", "study_step"]

logger = logging.getLogger(__name__)

#: The study state of a trial, by its status in ``trials.parquet``. A ``stopped`` trial
#: with no intermediate value is ``FAIL`` instead: it never reported.
STUDY_STATE: Mapping[str, TrialState] = {
    st.COMPLETED: TrialState.COMPLETE,
    st.STOPPED_BY_ASHA: TrialState.PRUNED,
    st.STOPPED: TrialState.PRUNED,
    st.DIVERGED: TrialState.FAIL,
    st.UNSUPPORTED_PRECISION: TrialState.FAIL,
    st.FAILED: TrialState.FAIL,
}


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


def study_outcome(status: str, *, value: Any, has_reports: bool) -> tuple[TrialState, float | None]:
    """The state and value to tell Optuna for a trial that ended with ``status``.

    ``COMPLETE`` needs a finite value (the last report's); Optuna takes the last
    intermediate value of a ``PRUNED`` trial itself. A ``stopped`` trial that never
    reported, and a ``completed`` one whose last value is not finite, are ``FAIL``.
    """
    state = STUDY_STATE.get(status, TrialState.FAIL)
    if state == TrialState.COMPLETE:
        try:
            value = float(value)
        except (TypeError, ValueError):
            return TrialState.FAIL, None
        return (TrialState.COMPLETE, value) if math.isfinite(value) else (TrialState.FAIL, None)
    if state == TrialState.PRUNED and not has_reports:
        return TrialState.FAIL, None
    return state, None


#: Journal operations on a running trial (Optuna's ``JournalOperation`` numbers: a
#: parameter, an intermediate value, a user or system attribute). The only ones not flushed
#: to disk one by one; ``tests/driver/test_searcher.py`` checks the numbers against Optuna.
RUNNING_TRIAL_OPS = frozenset({5, 7, 8, 9})


class TrialEndSyncedJournal(JournalFileBackend):
    """Optuna's journal file, ``fsync``-ed where a trial ends rather than at every append.

    Optuna's backend flushes every operation to disk: about 8 per trial (its creation,
    each parameter and intermediate value, its attributes, its end), each an ``fsync``,
    most of the journal's cost in a sweep of short trials and far more on network
    storage. Here every append still reaches the file before the call returns (another
    process, or this driver killed, sees it), but only operations that create or end a
    trial or change the study are flushed to the disk; each flush also flushes every
    append before it. So a power cut never loses an ended trial, and can lose only
    intermediate values and attributes of the trials running at that moment, which
    ``trials.parquet`` and the history keep too. The lock is Optuna's default symlink
    lock, which works on NFS and is what ``optuna-dashboard`` uses for a journal path.
    """

    def __init__(self, file_path: str):
        self._lock_obj = JournalFileSymlinkLock(file_path)
        self._path = file_path
        super().__init__(file_path, lock_obj=self._lock_obj)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if any(log.get("op_code") not in RUNNING_TRIAL_OPS for log in logs):
            super().append_logs(logs)
            return
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
        self._lock_obj.acquire()
        try:
            with open(self._path, "ab") as f:
                f.write(text.encode("utf-8"))
        finally:
            self._lock_obj.release()


def open_study_storage(sweep: SweepDir, *, legacy: bool = False) -> optuna.storages.BaseStorage:
    """The sweep's study storage: the journal file (:class:`TrialEndSyncedJournal`), or
    the SQLite file of older sweeps."""
    if legacy:
        return optuna.storages.RDBStorage(sweep.optuna_sqlite_url)
    return optuna.storages.JournalStorage(TrialEndSyncedJournal(str(sweep.optuna)))


def load_sweep_study(sweep: SweepDir) -> optuna.Study | None:
    """The sweep's study, from its journal or, for an older sweep, its SQLite file;
    ``None`` when the sweep has neither. The study is the only one in the file (it is
    named after the sweep as it was when the sweep started)."""
    if sweep.optuna.exists():
        storage = open_study_storage(sweep)
    elif sweep.optuna_sqlite.exists():
        storage = open_study_storage(sweep, legacy=True)
    else:
        return None
    names = optuna.get_all_study_names(storage)
    if not names:
        return None
    name = sweep.name if sweep.name in names else names[0]
    return optuna.load_study(study_name=name, storage=storage)


def check_sweep_study(sweep: SweepDir, linked: Iterable[int]) -> None:
    """Check, before a resume changes anything, that the sweep's study can be read and
    holds every Optuna trial the trial table links to (``linked``: its ``optuna_trial``
    numbers). A garbled or truncated journal otherwise reads as an empty study, and the
    resume would carry on with a searcher that knows nothing.

    Raises:
        DamagedSweepError: The study file is missing, unreadable or short of trials.
    """
    from hpsearch.errors import DamagedSweepError

    linked = set(linked)
    path = sweep.optuna if sweep.optuna.exists() or not sweep.optuna_sqlite.exists() \
        else sweep.optuna_sqlite
    problem = None
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
                problem = "it holds no study"
            elif linked - held:
                problem = (f"it holds {len(held)} trial(s) but the trial table links "
                           f"{len(linked)}")
    if problem is not None:
        raise DamagedSweepError(
            f"{path.name} of sweep {sweep.name!r} cannot be used ({problem}); nothing was "
            f"changed. The tables are intact: start a new sweep that learns from this one "
            f"(`hpsearch run SPACE --warm-start {sweep.name}`), or restore {path.name} from "
            "a backup and resume again.")


class SweepSearcher(OptunaSearch):
    """``OptunaSearch`` whose study holds exactly the sweep's trials, as they ended.

    Args:
        space, metric, mode, **kwargs: As for ``OptunaSearch``.
        spec: The sweep's spec: ``time_attr``, the milestones and how a status is decided.
        sweep: The sweep directory's path: the live records (whether ASHA stopped a trial,
            the ``optuna_trial`` link), and where the study is after a resume.
    """

    #: Asked before each new trial; ``False`` ends the search.
    may_start: Callable[..., bool | None] | None = None
    spec: Spec | None = None
    sweep: str | None = None
    _links: dict[str, int] | None = None  # Tune trial id -> Optuna trial number
    _keys: dict[str, set[int]] | None = None  # Tune trial id -> study steps reported
    _told: set[str] | None = None  # finished in the study before Tune reran them
    _reported: set[str] | None = None  # reported the objective at least once
    _orphans: list[int] | None = None  # asked by a dead driver, never reported: adoptable

    def __init__(self, space: Any = None, metric: str | None = None, mode: str | None = None,
                 *, spec: Spec | None = None, sweep: str | None = None, **kwargs: Any):
        super().__init__(space=space, metric=metric, mode=mode, **kwargs)
        self.spec = spec
        self.sweep = sweep
        self._init_state()

    def _init_state(self) -> None:
        for name, empty in (("_links", dict), ("_keys", dict), ("_told", set),
                            ("_reported", set), ("_orphans", list)):
            if getattr(self, name) is None:
                setattr(self, name, empty())

    # --- what the spec says -------------------------------------------------------------

    @property
    def milestones(self) -> tuple[int, ...]:
        if self.spec is None:
            return ()
        s = self.spec.scheduler
        return (*s.rungs(), s.max_t) if s.type == "asha" else (s.max_t,)

    def _time(self, result: Mapping[str, Any]) -> float | None:
        key = self.spec.scheduler.result_key if self.spec is not None else "epoch"
        t = result.get(key)
        if t is None:
            t = result.get("training_iteration")
        try:
            return float(t)
        except (TypeError, ValueError):
            return None

    def _records(self):
        return live.records(self.sweep) if self.sweep else None

    # --- suggest ------------------------------------------------------------------------

    def suggest(self, trial_id: str):  # noqa: ANN201
        verdict = self.may_start(trial_id=trial_id) if self.may_start is not None else True
        if verdict is None:  # not now: at its share of a shared cluster
            return None
        if not verdict:
            return OptunaSearch.FINISHED
        self._init_state()
        adopted_from = None
        if trial_id not in self._ot_trials:
            orphan = self._next_orphan()
            if orphan is not None:
                # Asked for a Tune trial the killed driver never saved: reuse it. Its
                # parameters are in the study, and define-by-run returns them unchanged.
                self._ot_trials[trial_id] = optuna.Trial(self._ot_study, orphan._trial_id)
                adopted_from = orphan.user_attrs.get("trial_id")
        config = super().suggest(trial_id)
        if trial_id not in self._links:
            trial = self._ot_trials[trial_id]
            trial.set_user_attr("trial_id", trial_id)
            if adopted_from:
                trial.set_user_attr("adopted_from", adopted_from)
            self._links[trial_id] = trial.number
            self._keys[trial_id] = set()
            records = self._records()
            if records is not None:
                records.link_optuna(trial_id, trial.number)
        return config

    def _next_orphan(self) -> optuna.trial.FrozenTrial | None:
        if not self._orphans:
            return None
        running = {t.number: t for t in self._ot_study.get_trials(
            deepcopy=False, states=(TrialState.RUNNING,))}
        while self._orphans:
            frozen = running.get(self._orphans.pop(0))
            if frozen is not None and not frozen.intermediate_values:
                return frozen
        return None

    # --- reports ------------------------------------------------------------------------

    def _report(self, trial_id: str, result: Mapping[str, Any]) -> None:
        if isinstance(self.metric, list) or result.get(OBJECTIVE_MISSING):
            return
        self._reported.add(trial_id)
        t = self._time(result)
        try:
            value = float(result.get(self.metric))
        except (TypeError, ValueError):
            return
        if t is None or t < 0 or not math.isfinite(value):
            return
        keys = self._keys.setdefault(trial_id, set())
        step = study_step(t, self.milestones, keys)
        if keys and step <= max(keys):  # a repeated report (restarted trial, same step)
            return
        self._ot_trials[trial_id].report(value, step)
        keys.add(step)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self._init_state()
        if (trial_id in self._completed_trials or trial_id in self._told
                or trial_id not in self._ot_trials):
            return
        self._report(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        self._init_state()
        if trial_id in self._completed_trials:
            return
        self._completed_trials.add(trial_id)
        if trial_id in self._told or trial_id not in self._ot_trials:
            return
        if result:
            self._report(trial_id, result)  # the last report: Tune sent it nowhere else
        status = self._status(trial_id, result, error)
        state, value = study_outcome(status, value=(result or {}).get(self.metric),
                                     has_reports=bool(self._keys.get(trial_id)))
        trial = self._ot_trials[trial_id]
        trial.set_user_attr("status", status)
        try:
            self._ot_study.tell(trial, value, state=state, skip_if_finished=True)
        except Exception as exc:  # noqa: BLE001 - one bad tell must not end the sweep
            logger.warning("could not tell Optuna how trial %s ended: %s", trial_id, exc)

    def _status(self, trial_id: str, result: Mapping[str, Any] | None, error: bool) -> str:
        """The status the trial table will give this trial (``TrialRecords.end``)."""
        if self.spec is None:  # restored from an older hpsearch without the repair
            return st.FAILED if error else (st.COMPLETED if result else st.STOPPED)
        records = self._records()
        row = records.trials.get(trial_id, {}) if records is not None else None
        never_reported = bool(result) and trial_id not in self._reported
        return final_status(
            result or None, spec=self.spec, errored=error or never_reported,
            stopped_early=bool(row.get("stopped_early")) if row is not None else None,
        )

    # --- resume -------------------------------------------------------------------------

    def restore(self, checkpoint_path: str) -> None:
        """Tune's saved state, re-linked to the study as it is now (it may be newer)."""
        current = {k: getattr(self, k) for k in ("spec", "sweep", "may_start")
                   if k in self.__dict__}
        super().restore(checkpoint_path)
        self.__dict__.update({k: v for k, v in current.items() if v is not None})
        self._init_state()
        self._reopen_study()
        frozen = {t.number: t for t in self._ot_study.get_trials(deepcopy=False)}
        owned = set()
        for trial_id, trial in list(self._ot_trials.items()):
            ft = frozen.get(trial.number)
            if ft is None:
                continue
            owned.add(ft.number)
            self._links[trial_id] = ft.number
            self._keys[trial_id] = set(ft.intermediate_values)
            if ft.state.is_finished():
                if trial_id not in self._completed_trials:
                    self._told.add(trial_id)  # finished after the save; Tune reruns it
            else:  # the pickled trial's cache is stale
                self._ot_trials[trial_id] = optuna.Trial(self._ot_study, ft._trial_id)
        self._orphans = []
        records = self._records()
        for ft in frozen.values():
            if ft.state != TrialState.RUNNING or ft.number in owned:
                continue
            if not ft.intermediate_values:
                self._orphans.append(ft.number)
                continue
            # The killed driver's trial trained and reported. The trial table keeps it as
            # `stopped`, with a row made now if the driver died before writing one, so
            # that it counts as planned: a row written before its reports would otherwise
            # be dropped as never reported (TrialRecords.forget_unfinished_except), and a
            # new trial would run in its place.
            self._ot_study._storage.set_trial_user_attr(  # no Trial: no sampler call
                ft._trial_id, "status", st.STOPPED)
            self._ot_study.tell(ft.number, state=TrialState.PRUNED, skip_if_finished=True)
            trial_id = ft.user_attrs.get("trial_id")
            if records is not None and trial_id:
                records.add_without_reports(trial_id, ft.params, optuna_trial=ft.number)

    def _reopen_study(self) -> None:
        """Open the study where the sweep directory is now (it may have been moved)."""
        if not self.sweep:
            return
        sweep = SweepDir.of(self.sweep)
        legacy = isinstance(self._storage, optuna.storages.RDBStorage)
        self._storage = open_study_storage(sweep, legacy=legacy)
        sampler = self._ot_study.sampler if self._ot_study is not None else self._sampler
        self._ot_study = optuna.load_study(study_name=self._study_name, storage=self._storage,
                                           sampler=sampler)
