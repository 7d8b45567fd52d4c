"""One run of a sweep: its plug-ins wired together, a new Tuner, and how the run ends.

Every ``hpsearch run`` and ``hpsearch resume`` builds a fresh Tuner here; nothing of Tune's
saved state is ever read back (its ``tune-<id>/`` folder is scratch, one per run). The
sweep's record (:class:`~hpsearch.driver.record.sweep_record.SweepRecord`) is handed to
the plug-ins that need it:

==============  ==========================================================================
record          the study, the trial rows, the tables, the manifest: the searcher asks
                and ends trials through it, ASHA marks the trials it stops, the tables
                callback feeds it Tune's events; the others read its rows
admission       the start rule: the searcher asks it, housekeeping reads the share
stopper         ends the run: Ctrl-C, a full disk, all failed, stalled, deadline, time budget
disk            the full-disk watch: a watcher of the record (it pauses the trials a full
                disk stopped) and a Tune callback; the stopper ends the run on it
tracking        the trackers (``track:``): an observer of the record, on threads of its own
==============  ==========================================================================
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from typing import Any

from hpsearch.driver.limits.admission import Admission, MilestoneTimes
from hpsearch.driver.limits.plan import Plan
from hpsearch.driver.monitor.disk import DiskWatch
from hpsearch.driver.monitor.housekeeping import Housekeeping
from hpsearch.driver.monitor.progress import ProgressCallback
from hpsearch.driver.monitor.quiet import QuietTrials
from hpsearch.driver.monitor.stall import StallWatch
from hpsearch.driver.monitor.stops import SweepStopper
from hpsearch.driver.monitor.tables import TablesCallback
from hpsearch.driver.record.objectives import ConstraintMetricMissing, directions
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.ids import hpsearch_id
from hpsearch.driver.search.samplers import make_sampler
from hpsearch.driver.search.schedulers import make_scheduler
from hpsearch.driver.search.searcher import SweepSearch, SweepSearcher
from hpsearch.driver.sweep.interrupt import ctrl_c_stops
from hpsearch.driver.sweep.result import Interrupted, SweepResult
from hpsearch.driver.sweep.storage import StorageNeed, disk_full_error, storage_need
from hpsearch.driver.trials.runners import Runner
from hpsearch.errors import StorageError, SweepStalledError
from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir

__all__ = ["TENSORBOARD_ENV", "SweepRun", "trial_dirname"]

#: Set to 1 in the driver's environment for Tune's TensorBoard event files in each trial's
#: folder, as plain Ray Tune writes them.
TENSORBOARD_ENV = "HPSEARCH_TENSORBOARD"


def trial_dirname(trial: Any) -> str:
    """A Tune trial's folder: named after its hpsearch id (Tune's id for a continued
    trial is new)."""
    return f"hpsearch_trial_{hpsearch_id(trial)}_{trial.trial_id}"


class SweepRun:
    """The plug-ins of one run of a sweep, and the run itself (:meth:`fit`).

    Args:
        record: The sweep's record (:meth:`SweepRecord.create` or :meth:`SweepRecord.open`),
            its ``spec`` as this run runs it.
        runner: How its trials run.
        plan: Its slots and rungs on this cluster.
        deadline_at: The deadline in epoch seconds, or ``None``.
        stream: Where progress goes.
        verbose: Ray's own output too.
        share: Register with the cluster's ledger (sweeps sharing a cluster).
        need: What the sweep may hold on its storage (for the full-disk line).
        trackers: The trackers ``track:`` asks for, already reached
            (:func:`hpsearch.track.make_trackers`).
    """

    def __init__(self, record: SweepRecord, runner: Runner, plan: Plan, *,
                 deadline_at: float | None = None, stream: Any, verbose: bool = False,
                 share: bool = True, need: StorageNeed | None = None,
                 trackers: tuple = ()):
        spec, sweep, records = record.spec, record.sweep, record.rows
        self.spec, self.sweep, self.runner, self.plan = spec, sweep, runner, plan
        self.record = record
        self.verbose = verbose
        self.need = need
        self.progress = ProgressCallback(records, spec, stream=stream)
        self.disk = DiskWatch(sweep, say=self.progress.log)
        record.watch(self.disk)
        record.open_study(directions=directions(spec.objectives),
                          sampler=make_sampler(_reseeded(spec, len(record.recorded))))
        if trackers:  # after the study opened: the reports a resume recovered are in
            record.observe(_tracking(trackers, sweep, spec, stream, say=self.progress.log))
        self.admission = Admission(
            planned=spec.trials.num, slots=plan.slots, deadline_at=deadline_at,
            first_milestone_s=functools.partial(MilestoneTimes(spec).median, records),
            ledger=_ledger_client(spec, sweep, plan.slots) if share else None)
        self.searcher = SweepSearcher(record, admission=self.admission)
        self.scheduler = make_scheduler(spec, record)
        self.tables = TablesCallback(record)
        self.watch = StallWatch(records, self.progress.log)
        self.quiet = QuietTrials(self.progress.log, trial_id=hpsearch_id,
                                 hung_after_s=spec.trials.hung_after_s)
        self.stopper = SweepStopper(records, all_failed_after=min(spec.trials.num, 3),
                                    watch=self.watch, time_budget_s=spec.budget.time_s,
                                    deadline_at=deadline_at, disk=self.disk,
                                    problem=lambda: self.record.problem)
        self.housekeeping = Housekeeping(runner, self.admission)

    def tuner(self) -> Any:
        """A new Tuner over this run's plug-ins."""
        from ray import tune
        from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

        # Tables first: progress reads the records the tables callback has just updated.
        # Tune's own per-trial files (params.json, result.json, progress.csv) are given
        # here, because its automatic loggers are off while the sweep runs (_tune_loggers).
        callbacks = [self.disk, self.tables, self.progress, self.watch, self.quiet,
                     self.housekeeping, CSVLoggerCallback(), JsonLoggerCallback()]
        return tune.Tuner(
            self.runner.trainable(self.sweep),
            tune_config=tune.TuneConfig(
                search_alg=SweepSearch(self.searcher, slots=self.plan.slots),
                scheduler=self.scheduler, num_samples=-1,  # the admission ends the search
                reuse_actors=self.runner.reuse_actors, trial_dirname_creator=trial_dirname),
            run_config=tune.RunConfig(
                name=SweepDir.new_tune_name(), storage_path=os.fspath(self.sweep.path),
                callbacks=callbacks, stop=self.stopper, verbose=2 if self.verbose else 0,
                failure_config=tune.FailureConfig(max_failures=self.runner.tune_max_failures)))

    def fit(self) -> SweepResult:
        """Run the sweep to its end; write the tables and the manifest however it ends.

        Raises:
            Interrupted: Ctrl-C; the tables are written and the sweep can be resumed.
            DiskFullError: The disk filled; what reached it is whole, and the sweep can be
                resumed once space is freed.
            SweepStalledError: Nothing could start for a long time; resumable.
            StorageError: A table could not be written (the last whole copy is on disk).
        """
        try:
            self.runner.open(self.sweep, slots=self.plan.slots)
            with ctrl_c_stops(self.stopper, say=self.progress.log), _tune_loggers(), \
                    _ray_logs_to(None if self.verbose else self.sweep.ray_log):
                self.tuner().fit()
        except KeyboardInterrupt:  # the second Ctrl-C
            self.stopper.interrupt()
        except Exception as exc:
            # Tune's end of a run reads back the files it wrote; on a full disk some are
            # cut short. The record does not depend on them.
            if not (self.disk.full or self.disk.note("reading back Tune's files", exc)):
                raise
        finally:
            self.runner.close()  # warm worker groups go before the tables are written
            self.progress.close()
            self.admission.close()  # the share goes back to the other sweeps at once
        return self._finish()

    def _finish(self) -> SweepResult:
        record = self.record
        if self.disk.full or self.stopper.reason == st.SWEEP_DISK_FULL:
            return self._paused_by_disk()
        interrupted = self.stopper.reason == st.SWEEP_INTERRUPTED
        status = st.SWEEP_INTERRUPTED
        try:
            if not interrupted:  # ended for good: the trials still running are stopped
                record.settle()
                record.prune()
            record.flush(force=True)
        finally:
            if not interrupted:
                status = self._status(record.rows.counts())
            counts = record.close(status)
        if record.storage_error is not None:
            if self.disk.full:
                return self._paused_by_disk()
            raise record.storage_error
        sweep = self.sweep
        if status == st.SWEEP_STALLED:
            raise SweepStalledError(
                f"the sweep stalled and was stopped: {self.watch.diagnosis}. The tables in "
                f"{sweep} are up to date; free the resources, then `hpsearch resume "
                f"{sweep.name} --storage {sweep.storage}`.")
        if status == st.SWEEP_MISSING_METRIC:
            raise ConstraintMetricMissing(
                f"{self.record.problem}. The sweep stopped; its tables are in {sweep}.")
        if status == st.SWEEP_INTERRUPTED:
            raise Interrupted(
                f"interrupted: the tables in {sweep} are up to date. "
                f"Continue with `hpsearch resume {sweep.name} --storage {sweep.storage}`.")
        return SweepResult(sweep.path, status, self.plan, best=record.best(),
                           front=record.front(), counts=counts)

    def _paused_by_disk(self) -> SweepResult:
        """The disk is full: what can still be written is, as after a Ctrl-C (nothing is
        settled: the running trials continue on resume), and the one line says the rest."""
        self.record.flush(force=True)  # whole or not at all; the last whole copy stays
        try:
            self.record.close(st.SWEEP_DISK_FULL)
        except StorageError:
            pass  # the manifest keeps saying "running": `ls` then says to resume it
        need = storage_need(self.spec, self.plan.slots, sweep=self.sweep,
                            checkpoint=self.need.checkpoint if self.need else None)
        raise disk_full_error(self.sweep, need)

    def _status(self, counts: dict[str, int]) -> str:
        reason = self.stopper.reason
        if reason == st.SWEEP_STALLED:
            return st.SWEEP_STALLED
        if reason == st.SWEEP_DEADLINE or self.admission.refused_for_deadline:
            return st.SWEEP_DEADLINE
        if reason in (st.SWEEP_ALL_FAILED, st.SWEEP_MISSING_METRIC):
            return reason
        if not any(counts.get(s) for s in st.WITH_RESULT):
            return st.SWEEP_NO_TRIAL_COMPLETED
        return st.SWEEP_FINISHED


def _tracking(trackers: tuple, sweep: SweepDir, spec: Spec, stream: Any, *, say: Any) -> Any:
    """The trackers as one observer of the record; TensorBoard's command is printed."""
    from hpsearch.track import Tracking

    if spec.track.tensorboard:
        print(f"  tensorboard: tensorboard --logdir {sweep.tensorboard}", file=stream)
    hint = f"`hpsearch export {sweep.name} --storage {sweep.storage}`"
    return Tracking(list(trackers), say=say, hint=hint)


def _reseeded(spec: Spec, runs_before: int) -> Spec:
    """The spec whose sampler continues a sweep that already has ``runs_before`` trials:
    its seed mixed with that count, so that a resumed sweep's random start-up points are
    not the first run's again (the sampler's state is not saved)."""
    from dataclasses import replace

    seed = spec.search.seed
    if not runs_before or seed is None:
        return spec
    return replace(spec, search=replace(spec.search, seed=(seed * 1_000_003 + runs_before) % 2**32))


def _ledger_client(spec: Spec, sweep: SweepDir, slots: int) -> Any:
    """This run's claim on the cluster (:mod:`hpsearch.driver.limits.ledger`)."""
    import uuid

    from hpsearch.driver.limits.ledger import EXPIRE_S, LedgerClient, SweepClaim

    return LedgerClient(SweepClaim(
        sweep_id=f"{sweep}#{uuid.uuid4().hex[:8]}", name=sweep.name,
        demand=spec.resources.per_trial(), want=slots, weight=spec.resources.share,
        registered=time.time(),
        expire_s=float(os.environ.get("HPSEARCH_LEDGER_EXPIRE_S", EXPIRE_S))))


@contextlib.contextmanager
def _tune_loggers():
    """Tune without its automatic loggers while the sweep runs, unless ``TENSORBOARD_ENV``.

    Tune adds a CSV, a JSON and a TensorBoard logger to every run that lacks them. The
    trial tables hold what the TensorBoard files would (every report, in ``history``), and
    writing them was the largest cost a sweep of short trials paid per report: 11-12 s of
    a 2,000-trial sweep's 40-65 s of driver time (``benchmarks/scale.py``, sampled with
    py-spy). :meth:`SweepRun.tuner` gives the CSV and JSON loggers itself. Tune reads the
    variable once, as ``fit`` starts, and it is put back as it was after."""
    key = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
    if os.environ.get(TENSORBOARD_ENV) == "1":
        yield
        return
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


class _FileHandler(logging.FileHandler):
    """A log file that never interrupts the sweep: a line the disk cannot take is lost."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        pass


@contextlib.contextmanager
def _ray_logs_to(path: Any):
    """Ray's log lines in the driver (Tune's and Train's warnings, failed syncs of its own
    files, with their tracebacks, and the raylet's messages) go to ``path`` instead of the
    console while the sweep runs; the console keeps hpsearch's lines. ``None``: left as
    they are (``--verbose``)."""
    if path is None:
        yield
        return
    from hpsearch.driver.internals import raylet_messages_to

    logger = logging.getLogger("ray")
    handler = _FileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    before = logger.handlers[:], logger.propagate
    logger.handlers, logger.propagate = [handler], False
    try:
        with raylet_messages_to(logging.getLogger("ray.raylet_messages")):
            yield
    finally:
        logger.handlers, logger.propagate = before
        handler.close()
