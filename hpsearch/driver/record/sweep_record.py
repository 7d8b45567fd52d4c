"""One sweep's record, with one owner: :class:`SweepRecord`.

A sweep's truth is its study journal (where a trial begins and where its end becomes
durable), its trial rows (:class:`~hpsearch.store.records.TrialRecords`, written out as
the trial tables) and its manifest. :class:`SweepRecord` owns all four for one run of the
sweep, and every change to them is one of its verbs:

==============  ===========================================================================
``create``      a new sweep's directory, space and manifest
``open``        an existing sweep, read and checked, the rows made to agree with the study
``open_study``  the study with this run's sampler, and its journal
``learnt_from`` earlier sweeps' trials in the study: the spec's seed, the manifest's note
``ask``         a new trial of the study, its parameters drawn, run as a :class:`LiveTrial`
``carry_on``    a resumed sweep's unfinished trial continued as the same Optuna trial
``start``       a trial's row begins (Tune started it)
``report``      the one place a report goes: the row, the history, the study's step
``end``         the one place a trial ends: its row, the study's tell, the journal synced
``annotate``    what is learnt after an end: the error's line, the last checkpoint
``prune``       the checkpoints of ended trials outside the best ones deleted, rows marked
``flush``       the journal synced, then both tables written (at most every few seconds)
``settle``      a sweep ended for good: every trial the study still runs is ended
``close``       the manifest's last word on this run
==============  ===========================================================================

The searcher (a trial asked, a trial ended), the ASHA scheduler (a trial stopped early)
and the tables callback (a trial started, each report) forward Tune's events here; the
progress line, the stopper and the admission read :attr:`SweepRecord.rows`. Features attach
at one of two seams:

* a *watcher* (:class:`RecordWatcher`) changes how a trial ends: the full-disk watch
  pauses a trial instead of failing it, and hears of every write the disk refused;
* an *observer* (:class:`RecordObserver`) hears what the record took in, after it took
  it: a trial started, its reports as history rows, its end, the run's close. The
  trackers (:mod:`hpsearch.track`) are observers. An observer that raises is told of no
  more events; the record and the sweep go on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from optuna.trial import TrialState

from hpsearch.driver.record.live import LiveTrial, milestones
from hpsearch.driver.record.seams import Observers, RecordObserver, RecordWatcher
from hpsearch.driver.record.objectives import directions as objective_directions
from hpsearch.driver.record.objectives import set_constraints, study_value, violations
from hpsearch.driver.record.study import (RecordedTrial, check_sweep_study, open_study,
                                          recorded_trials, status_of, study_outcome)
from hpsearch.errors import StorageError, SweepNotFoundError
from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store import sweeps
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import new_manifest, record_driver, write_manifest
from hpsearch.store.records import TrialRecords
from hpsearch.store.retention import CheckpointPruner
from hpsearch.store.tables.writer import TablesWriter

__all__ = ["RecordObserver", "RecordWatcher", "SweepRecord"]

logger = logging.getLogger(__name__)


class SweepRecord:
    """The study, the trial rows, the tables' writer and the manifest of one sweep.

    Build it with :meth:`create` (a new sweep), :meth:`open` (a resume) or
    :meth:`in_memory` (a replay, a test: no files), then :meth:`open_study`.

    Attributes:
        spec: The sweep's spec as this run runs it.
        sweep: Its directory (``None`` in memory).
        rows: The trial rows and reports (read them; change them through the record).
        recorded: The sweep's trials the study held when this run began.
        unfinished: Those of them this run continues first (a resume).
        manifest: The manifest, as this run keeps it.
        study, journal: The study and its journal, once :meth:`open_study` ran.
        problem: Why the sweep cannot go on: a trial's first report lacked a metric the
            space's other objectives or constraints name (the stopper ends the sweep).
        storage_error: The last table write's failure, cleared by one that succeeds.
    """

    def __init__(self, spec: Spec, sweep: SweepDir | None, *, rows: TrialRecords | None = None,
                 recorded: Sequence[RecordedTrial] = (), unfinished: Sequence[RecordedTrial] = (),
                 manifest: dict[str, Any] | None = None, interval_s: float = 2.0):
        self.spec = spec
        self.sweep = sweep
        self.rows = rows if rows is not None else TrialRecords(spec)
        self.recorded = list(recorded)
        self.unfinished = list(unfinished)
        self.manifest = manifest if manifest is not None else {}
        self.study: Any = None
        self.journal: Any = None
        self.problem: str | None = None
        self.live: dict[str, LiveTrial] = {}  # the trials this run runs, by hpsearch id
        self._milestones = milestones(spec)
        self.storage_error: StorageError | None = None
        self.writes = 0
        self.interval_s = interval_s
        self._writer = TablesWriter(sweep) if sweep is not None else None
        self._pruner = CheckpointPruner()
        self._watchers: list[RecordWatcher] = []
        self._observers = Observers()
        self._written_version = -1
        self._last_write = 0.0

    # --- opening -----------------------------------------------------------------------

    @classmethod
    def create(cls, spec: Spec, sweep: SweepDir, *, cluster: Mapping[str, float],
               address: str | None, plan: Mapping[str, Any], replace: bool) -> "SweepRecord":
        """A new sweep at ``sweep``: its directory, ``space.yaml`` and manifest (this
        command, the versions, the ``cluster`` at ``address``, the ``plan``) written (the
        sweep there first deleted with ``replace``).

        Raises:
            StorageError: The directory cannot be created or written.
        """
        objective = {"metric": spec.objective.metric, "mode": spec.objective.mode}
        manifest = new_manifest(name=sweep.name, seed=spec.search.seed, cluster=cluster,
                                address=address, objective=objective, plan=plan)
        sweeps.create(sweep, spec.raw, manifest, replace=replace)
        return cls(spec, sweep, manifest=manifest)

    @classmethod
    def open(cls, spec: Spec, sweep: SweepDir, manifest: dict[str, Any]) -> "SweepRecord":
        """The sweep at ``sweep`` to resume: its tables and study read and checked before
        anything is changed, then made to agree (:meth:`_reconcile`).

        Raises:
            DamagedSweepError: A table or the study cannot be read.
            SweepNotFoundError: The tables hold trials the study does not name: a sweep of
                an hpsearch from before trials were linked to the study, which cannot
                resume.
        """
        from hpsearch.store.tables import load_tables

        rows = TrialRecords(spec)
        rows.load(*load_tables(sweep))
        study = check_sweep_study(sweep, (int(r["optuna_trial"]) for r in rows.trials.values()
                                          if r.get("optuna_trial") is not None))
        recorded = recorded_trials(study) if study is not None else []
        named = {t.trial_id for t in recorded}
        if any(trial_id not in named for trial_id in rows.trials):
            raise SweepNotFoundError(
                f"sweep {sweep.name!r} was written by an older hpsearch whose study does not "
                f"name its trials, so it cannot be resumed; its tables stay readable. "
                f"Continue with a new sweep that learns from it: `hpsearch run {sweep.space} "
                f"--warm-start {sweep.name} --name {sweep.name}-2`")
        return cls(spec, sweep, rows=rows, recorded=recorded,
                   unfinished=_reconcile(rows, recorded), manifest=manifest)

    @classmethod
    def in_memory(cls, spec: Spec) -> "SweepRecord":
        """A record with no files: the study in memory, nothing written (replays, tests)."""
        return cls(spec, None)

    def open_study(self, *, sampler: Any = None, directions: Sequence[str] | None = None) -> Any:
        """Open (or create) the study with this run's ``sampler``; returns it. Its
        ``directions`` are the spec's objectives' unless given. A resumed sweep's
        unfinished trials get the reports their newest checkpoints were taken at and the
        record never received (:meth:`_recover_checkpointed_reports`). A study warm start
        opened already takes the ``sampler``, not read from its journal again."""
        if directions is None:
            directions = objective_directions(self.spec.objectives)
        if self.study is not None:
            if sampler is not None:
                self.study.sampler = sampler
            return self.study
        if self.sweep is None:
            import optuna

            self.study = optuna.create_study(directions=list(directions), sampler=sampler)
            return self.study
        self.study, self.journal = open_study(self.sweep, directions=directions,
                                              sampler=sampler)
        if self.unfinished:
            self._recover_checkpointed_reports()
        return self.study

    def learnt_from(self, spec: Spec, summary: Mapping[str, Any]) -> None:
        """The study holds earlier sweeps' trials: this run runs ``spec`` (its sampler's
        own seed); the manifest says what was imported (written as the run begins)."""
        self.spec = spec
        self.manifest.update(seed=spec.search.seed, warm_start=dict(summary))

    def watch(self, watcher: RecordWatcher) -> None:
        """Attach a feature that may pause trials and hears of refused writes."""
        self._watchers.append(watcher)

    def observe(self, observer: RecordObserver) -> None:
        """Attach a feature that follows the record; it is told :meth:`RecordObserver.began`
        at once."""
        self._observers.attach(observer, self)

    def begin(self, *, local_ray: list[dict[str, int]], plan: Mapping[str, Any] | None = None,
              space: Mapping[str, Any] | None = None, simulated_gpu: bool = False) -> None:
        """This run begins: who drives it, recorded in the manifest (a resume's run, with
        its ``plan``, and its ``space`` when the resume changed it), and whether its GPUs
        are simulated (tests), in one write."""
        if self.sweep is None:
            return
        if plan is not None:
            sweeps.begin_run(self.sweep, self.manifest, plan=plan)
        if space is not None:
            sweeps.write_space(self.sweep, space)
        record_driver(self.manifest, local_ray=local_ray, simulated_gpu=simulated_gpu)
        write_manifest(self.sweep, self.manifest)

    def _recover_checkpointed_reports(self) -> None:
        """A driver stopped by Ctrl-C or a kill lets its running trials go on until they are
        stopped: a trial can checkpoint, and write the report beside it, after the record
        stopped listening. Its resume continues from that checkpoint, so without this the
        report would be in neither the history nor the study. Each unfinished trial's
        checkpointed reports past its last one here join its row, the history and the
        study (at their study steps), and so ASHA's seeded rungs."""
        from hpsearch.driver.internals import reopen_trial

        key = self.spec.scheduler.result_key
        for i, trial in enumerate(self.unfinished):
            live = LiveTrial(reopen_trial(self.study, trial.number), dict(trial.intermediate))
            for report in self.sweep.checkpointed_reports(trial.trial_id):
                t = report.get(key)
                if (not isinstance(t, (int, float))
                        or t <= self.rows.last_reported(trial.trial_id, key)):
                    continue
                self.rows.result(trial.trial_id, report)
                live.report(report, self.spec, self._milestones)
            self.unfinished[i] = replace(trial, intermediate=live.reported)
        self.recorded = [next((u for u in self.unfinished if u.number == t.number), t)
                         for t in self.recorded]
        if self.journal is not None:
            self.journal.sync()

    # --- a trial's life ----------------------------------------------------------------

    def start(self, trial_id: str, params: Mapping[str, Any]) -> None:
        """Tune started the trial (again, after a failure it retries)."""
        self.rows.start(trial_id, params)
        if self._observers:
            self._observers.tell("started", trial_id, dict(self.rows.trials[trial_id]))

    def ask(self, trial_id: str, space: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """A new trial of the study, run as ``trial_id``; returns its parameters, drawn by
        the define-by-run ``space`` (:func:`hpsearch.driver.search.space.define_by_run`)."""
        trial = self.study.ask()
        params = space(trial)
        trial.set_user_attr("trial_id", trial_id)
        self._runs(trial_id, trial, {})
        return params

    def carry_on(self, trial: RecordedTrial) -> dict[str, Any]:
        """Continue a resumed sweep's unfinished ``trial`` as the same Optuna trial, with
        the study steps it reported; returns its parameters."""
        from hpsearch.driver.internals import reopen_trial

        self._runs(trial.trial_id, reopen_trial(self.study, trial.number), trial.intermediate)
        return dict(trial.params)

    def _runs(self, trial_id: str, trial: Any, reported: Mapping[int, Any]) -> None:
        self.live[trial_id] = LiveTrial(trial, dict(reported))
        self.rows.link_optuna(trial_id, trial.number)

    def report(self, trial_id: str, result: Mapping[str, Any]) -> None:
        """One report of the trial: its row and the history, then its study step (a trial
        this run runs, :meth:`LiveTrial.report`), then the observers."""
        before = len(self.rows.history)
        self.rows.result(trial_id, result)
        live = self.live.get(trial_id)
        if live is not None:
            live.report(result, self.spec, self._milestones)
            self.problem = self.problem or live.problem
        if self._observers and len(self.rows.history) > before:
            self._observers.tell("reported", trial_id, self.rows.history[before:])

    def stopped_early(self, trial_id: str) -> None:
        """ASHA stopped the trial at a rung (before ``max_t``)."""
        self.rows.stopped_by_scheduler(trial_id)

    def end(self, trial_id: str, *, errored: bool = False,
            returned: bool = False) -> str | None:
        """End a trial this run runs (:meth:`link`): its row, then the study's tell with
        the matching state (several objectives and constraints told from its last report
        with every objective), then the journal synced, from when on its result is
        durable. Returns its status, or ``None`` when a watcher paused it (its row and
        study trial stay unfinished).

        Args:
            errored: Its code raised.
            returned: Its training function returned by itself.
        """
        live = self.live.pop(trial_id)
        trial, last = live.trial, live.last
        if errored and any(w.pauses(trial_id) for w in self._watchers):
            return None
        status = self.rows.end(trial_id, errored=errored, returned=returned)
        self._ended(trial_id)
        value = study_value(self.spec.objectives, last=last,
                            final_value=self.rows.trials[trial_id].get("final_value"))
        state, value = study_outcome(status, value=value, has_reports=bool(live.reported))
        try:
            trial.set_user_attr("status", status)
            if self.spec.constraints and last is not None and state != TrialState.FAIL:
                set_constraints(trial, violations(self.spec.constraints, last))
            self.study.tell(trial, value, state=state, skip_if_finished=True)
            if self.journal is not None:
                self.journal.sync()  # the trial's end is durable from here on
        except Exception as exc:  # noqa: BLE001 - one bad tell must not end the sweep
            if not self._write_failed("writing the study journal", exc):
                logger.warning("could not tell Optuna how trial %s ended: %s", trial_id, exc)
        return status

    def annotate(self, trial_id: str, *, error: str | None = None,
                 checkpoint: str | None = None) -> None:
        """What was learnt after an ended trial's end (a paused trial's row stays clean)."""
        if self.rows.trials.get(trial_id, {}).get("status") in st.ENDED:
            self.rows.annotate(trial_id, error=error, checkpoint=checkpoint)
            if error is not None:
                self._ended(trial_id)

    def prune(self) -> None:
        """Delete the checkpoints of ended trials outside the best ones kept
        (``checkpoints.keep_best_trials``); their rows say so."""
        if self.sweep is None:
            return
        try:
            self._pruner.prune(self.rows, self.sweep)
        except OSError:  # a checkpoint we cannot delete must not stop the sweep
            pass

    # --- the sweep's end -----------------------------------------------------------------

    def settle(self) -> dict[int, str]:
        """End, in the study and the rows, every trial the study still runs: the sweep
        ended for good (finished, time budget, deadline, all failed, stalled), not
        interrupted. A trial asked but never started gets a ``stopped`` row, so the trial
        table lists every trial the study holds. Returns what was told (Optuna number ->
        state name)."""
        import optuna

        from hpsearch.driver.internals import reopen_trial

        told: dict[int, str] = {}
        for trial in recorded_trials(self.study):
            if trial.ended:
                continue
            if trial.trial_id not in self.rows.trials:
                self.rows.add_without_reports(trial.trial_id, trial.params,
                                              optuna_trial=trial.number)
            status = self.rows.end(trial.trial_id, budget_expired=True)
            self._ended(trial.trial_id)
            row = self.rows.trials[trial.trial_id]
            state, value = study_outcome(status, value=row.get("final_value"),
                                         has_reports=bool(trial.intermediate))
            handle = reopen_trial(self.study, trial.number)
            handle.set_user_attr("status", status)
            self.study.tell(handle, value, state=state, skip_if_finished=True)
            told[trial.number] = state.name
        running = (optuna.trial.TrialState.RUNNING,)
        for trial in self.study.get_trials(deepcopy=False, states=running):
            if "trial_id" not in trial.user_attrs:  # an older hpsearch's, never linked
                self.study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
                told[trial.number] = "FAIL"
        if told and self.journal is not None:
            self.journal.sync()
        return told

    def flush(self, *, force: bool = False) -> None:
        """Sync the journal, then write both tables, if anything changed since the last
        write and ``interval_s`` has passed (unless ``force``). The tables never name a
        trial a power cut could take from the study. A failure is kept in
        :attr:`storage_error` (the run goes on; the driver raises it at the end)."""
        now = time.monotonic()
        version = self.rows.version
        if self._writer is None or version == self._written_version or (
                not force and now - self._last_write < self.interval_s):
            return
        self._last_write = now
        try:
            if self.journal is not None:
                self.journal.sync()
            self._writer.write(self.rows)
            self._written_version = version
            self.storage_error = None  # the tables on disk are whole and current again
        except StorageError as exc:
            self.storage_error = exc
        except OSError as exc:  # the journal could not be flushed
            self.storage_error = StorageError(
                f"cannot flush the study journal in {self.sweep}: {exc.strerror or exc}",
                errno=exc.errno)
        if self.storage_error is not None:
            self._write_failed("writing the trial tables", self.storage_error)
        self.writes += 1

    def close(self, status: str) -> dict[str, int]:
        """Record how this run ended in the manifest; returns the trials per status."""
        counts = self.rows.counts()
        try:
            if self.sweep is not None:
                sweeps.end_run(self.sweep, self.manifest, status=status, counts=counts)
        finally:
            self._observers.tell("closed", status, self)
        return counts

    # --- questions -----------------------------------------------------------------------

    def best(self) -> dict[str, Any] | None:
        return self.rows.best()

    def front(self) -> list[dict[str, Any]]:
        """The rows on the Pareto front (several objectives)."""
        return [r for r in self.rows.trials.values() if r.get("pareto")]

    # --- inside --------------------------------------------------------------------------

    def _ended(self, trial_id: str) -> None:
        if self._observers:
            self._observers.tell("ended", trial_id, {k: v for k, v in self.rows.trials[trial_id].items()
                                           if k != "last"})

    def _write_failed(self, what: str, error: BaseException) -> bool:
        return any([w.write_failed(what, error) for w in self._watchers])


def _reconcile(rows: TrialRecords, recorded: Sequence[RecordedTrial]) -> list[RecordedTrial]:
    """Make the rows (loaded from the tables) agree with the study's ``recorded`` trials;
    returns the unfinished ones, to continue, in the study's order.

    A trial the study has ended but the tables have not (the driver was killed between
    the two) is ended as the study says; a trial the study still runs is unfinished (its
    reports the tables missed are recovered from the study)."""
    unfinished = []
    for trial in recorded:
        row = rows.trials.get(trial.trial_id)
        if not trial.ended:
            unfinished.append(trial)
            if trial.intermediate:  # reports the tables missed stay in the history
                rows.recover_reports(trial.trial_id, params=trial.params,
                                     values=trial.intermediate)
            rows.link_optuna(trial.trial_id, trial.number)
        elif row is None or row.get("status") not in st.ENDED:
            rows.end_as_recorded(trial.trial_id, params=trial.params, status=status_of(trial),
                                 optuna_trial=trial.number, values=trial.intermediate,
                                 final_value=trial.value)
    return unfinished
