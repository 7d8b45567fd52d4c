"""One run of a sweep: its plug-ins wired together, a new Tuner, and how the run ends.

Every ``hpsearch run`` and ``hpsearch resume`` builds a fresh Tuner here; nothing of Tune's
saved state is ever read back (its ``tune-<id>/`` folder is scratch, one per run). The
run composes the sweep's record
(:class:`~hpsearch.driver.record.sweep_record.SweepRecord`) with one object from each
room that plugs into Tune, each built in one call:

==========  ==============================================================================
record      the study, the trial rows, the tables, the manifest: the searcher asks and
            ends trials through it, ASHA marks the trials it stops, the tables callback
            feeds it Tune's events; the others read its rows
admission   the start rule (``limits``): the searcher asks it, housekeeping reads the share
monitor     the watchers (``monitor``): progress, the full-disk watch (a watcher of the
            record), the tables callback, stall, quiet trials, housekeeping, and the one
            stopper that ends the run on Ctrl-C, a full disk, all failed, stalled, the
            deadline or the time budget
search      the searcher and ASHA (``search``), over the study opened with this run's
            sampler
runner      how a trial runs (``trials``): the trainable Tune runs, warm worker groups
tracking    the trackers (``track:``): an observer of the record, on threads of its own
==========  ==============================================================================
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from hpsearch.driver.limits.admission import admission_for
from hpsearch.driver.limits.plan import Plan
from hpsearch.driver.monitor.plugins import Monitors
from hpsearch.driver.record.objectives import ConstraintMetricMissing
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.ids import hpsearch_id
from hpsearch.driver.search.plugins import open_search
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
    """The plug-ins of one run of a sweep, and the run itself (:meth:`fit`): the record,
    and one object from each room that plugs into Tune, each built in one operation.

    Args:
        record: The sweep's record (:meth:`SweepRecord.create` or :meth:`SweepRecord.open`),
            its ``spec`` as this run runs it.
        runner: How its trials run.
        plan: Its slots and rungs on this cluster.
        deadline_at: The deadline in epoch seconds, or ``None``.
        stream: Where progress goes.
        verbose: Ray's own output too.
        need: What the sweep may hold on its storage (for the full-disk line).
        trackers: The trackers ``track:`` asks for, already reached
            (:func:`hpsearch.track.make_trackers`).

    Attributes:
        admission: The start rule (:func:`~hpsearch.driver.limits.admission.admission_for`).
        monitor: The watchers and the stopper
            (:class:`~hpsearch.driver.monitor.plugins.Monitors`).
        search: The searcher and ASHA over the study
            (:func:`~hpsearch.driver.search.plugins.open_search`).
    """

    def __init__(self, record: SweepRecord, runner: Runner, plan: Plan, *,
                 deadline_at: float | None = None, stream: Any, verbose: bool = False,
                 need: StorageNeed | None = None, trackers: tuple = ()):
        self.record, self.runner, self.plan = record, runner, plan
        self.spec, self.sweep = record.spec, record.sweep
        self.verbose, self.need = verbose, need
        self.admission = admission_for(record.spec, slots=plan.slots, records=record.rows,
                                       deadline_at=deadline_at, sweep_key=str(self.sweep.path),
                                       sweep_name=self.sweep.name)
        try:  # the claim on a shared cluster goes back at once if the rest fails
            self.monitor = Monitors(record, runner, self.admission, deadline_at=deadline_at,
                                    stream=stream)
            self.search = open_search(record, self.admission)
            if trackers:  # after the study opened: the reports a resume recovered are in
                record.observe(_tracking(trackers, self.sweep, self.spec, stream,
                                         say=self.monitor.say))
        except BaseException:
            self.admission.close()
            raise

    def tuner(self) -> Any:
        """A new Tuner over this run's plug-ins."""
        from ray import tune
        from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

        # Tune's own per-trial files (params.json, result.json, progress.csv) are given
        # here, because its automatic loggers are off while the sweep runs (_tune_loggers).
        callbacks = [*self.monitor.callbacks(), CSVLoggerCallback(), JsonLoggerCallback()]
        return tune.Tuner(
            self.runner.trainable(self.sweep),
            tune_config=tune.TuneConfig(
                search_alg=self.search.search_alg(slots=self.plan.slots),
                scheduler=self.search.scheduler, num_samples=-1,  # the admission ends it
                reuse_actors=self.runner.reuse_actors, trial_dirname_creator=trial_dirname),
            run_config=tune.RunConfig(
                name=SweepDir.new_tune_name(), storage_path=os.fspath(self.sweep.path),
                callbacks=callbacks, stop=self.monitor.stopper,
                verbose=2 if self.verbose else 0,
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
            with ctrl_c_stops(self.monitor.stopper, say=self.monitor.say), _tune_loggers(), \
                    _ray_logs_to(None if self.verbose else self.sweep.ray_log):
                self.tuner().fit()
        except KeyboardInterrupt:  # the second Ctrl-C
            self.monitor.stopper.interrupt()
        except Exception as exc:
            # Tune's end of a run reads back the files it wrote; on a full disk some are
            # cut short. The record does not depend on them.
            disk = self.monitor.disk
            if not (disk.full or disk.note("reading back Tune's files", exc)):
                raise
        finally:
            self.runner.close()  # warm worker groups go before the tables are written
            self.monitor.close()
            self.admission.close()  # the share goes back to the other sweeps at once
        return self._finish()

    def _finish(self) -> SweepResult:
        record, disk, stopper = self.record, self.monitor.disk, self.monitor.stopper
        if disk.full or stopper.reason == st.SWEEP_DISK_FULL:
            return self._paused_by_disk()
        interrupted = stopper.reason == st.SWEEP_INTERRUPTED
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
            if disk.full:
                return self._paused_by_disk()
            raise record.storage_error
        sweep = self.sweep
        if status == st.SWEEP_STALLED:
            raise SweepStalledError(
                f"the sweep stalled and was stopped: {self.monitor.stall.diagnosis}. The tables in "
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
        reason = self.monitor.stopper.reason
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
