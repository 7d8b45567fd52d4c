"""One run of a sweep's Tuner, new or restored: build it, fit it, write what it found.

:class:`SweepRun` holds the per-run objects a new sweep and a resumed one share (records,
callbacks, stopper); :func:`new_tuner` builds the Tuner of a new sweep and :func:`fit` runs
either kind to its end and writes the tables and the manifest, whatever the ending.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpsearch.driver.plan import Plan
from hpsearch.driver.runners import Runner
from hpsearch.errors import HpsearchError, SweepStalledError
from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import now_iso, write_manifest
from hpsearch.store.records import TrialRecords

__all__ = ["EXIT_INTERRUPTED", "Interrupted", "SweepResult", "SweepRun", "fit", "new_tuner"]

EXIT_OK, EXIT_NO_TRIAL, EXIT_INTERRUPTED = 0, 3, 130


class Interrupted(HpsearchError, KeyboardInterrupt):
    """Ctrl-C stopped the sweep; the tables are written and it can be resumed.

    Also a ``KeyboardInterrupt``: Ray Tune takes the first Ctrl-C to stop the sweep
    gracefully, and this passes it on to whatever called the sweep, so a loop of sweeps or
    a test session stops too instead of going on to the next one."""

    exit_code = EXIT_INTERRUPTED


@dataclass
class SweepResult:
    """What :func:`hpsearch.run_sweep` returns.

    Attributes:
        sweep_dir: The sweep directory.
        status: ``finished``, ``deadline`` (the deadline ended it; trials that ran are in
            the tables), ``no_trial_completed``, ``all_failed``, ``interrupted``,
            ``stalled`` or ``planned``.
        best: The best trial's row of the trial table (``None`` if none has a value).
        plan: Slots, rungs and cost estimate.
        counts: Trials per status.
    """

    sweep_dir: Path
    status: str
    plan: Plan
    best: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return {"finished": EXIT_OK, "planned": EXIT_OK, "deadline": EXIT_OK,
                "interrupted": EXIT_INTERRUPTED}.get(self.status, EXIT_NO_TRIAL)


class SweepRun:
    """Per-run objects shared by a new sweep and a resumed one."""

    def __init__(self, spec: Spec, sweep: SweepDir, runner: Runner, *, verbose: bool, stream,
                 records: TrialRecords | None = None, deadline_at: float | None = None,
                 slots: int | None = None, share: bool = True):
        from hpsearch.driver import live
        from hpsearch.driver.budget import StartLimits
        from hpsearch.driver.callbacks import (
            AllFailedStopper,
            Janitor,
            ProgressCallback,
            StallWatch,
            TablesCallback,
        )

        self.spec = spec
        self.sweep = sweep
        self.runner = runner
        self.records = records or TrialRecords(spec)
        self.tables = TablesCallback(self.records, sweep)
        self.progress = ProgressCallback(self.records, spec, stream=stream)
        self.stopper = AllFailedStopper(self.records, sweep, threshold=min(spec.trials.num, 3))
        self.watch = StallWatch(self.records, self.progress.log)
        live.register_watch(sweep, self.watch)
        self.janitor = Janitor(worker_groups=runner.kind != "in_process")
        self.limits = StartLimits(self.records, spec, deadline_at=deadline_at, slots=slots,
                                  ledger=_ledger_client(spec, sweep, slots) if share else None)
        live.register_limits(sweep, self.limits)
        self.started = time.time()
        self.verbose = verbose

    @property
    def time_budget_s(self) -> float | None:
        """What Tune's ``time_budget_s`` must be: the earlier of the time budget and the
        deadline, counted from now."""
        left = [b for b in (self.spec.budget.time_s,) if b]
        if self.limits.deadline_at is not None:
            left.append(max(self.limits.deadline_at - time.time(), 1.0))
        return min(left) if left else None

    def ended_by_deadline(self) -> bool:
        at = self.limits.deadline_at
        return at is not None and (self.limits.refused_for_deadline or time.time() >= at - 1)

    @property
    def callbacks(self) -> list:
        # Tables first: progress reads the records the tables callback has just updated.
        extra = []
        if self.runner.kind == "warm":
            from hpsearch.driver.callbacks import WarmGroupsCallback

            extra.append(WarmGroupsCallback(self.runner, str(self.sweep)))
        from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

        # Tune's own per-trial files (params.json, result.json, progress.csv), given here
        # because its automatic loggers are off while the sweep runs (`_tune_loggers`).
        return [self.tables, self.progress, self.watch, self.janitor, *extra,
                CSVLoggerCallback(), JsonLoggerCallback()]


def _ledger_client(spec: Spec, sweep: SweepDir, slots: int | None) -> Any:
    """This run's claim on the cluster (:mod:`hpsearch.driver.ledger`)."""
    import uuid

    from hpsearch.driver.ledger import LedgerClient, SweepClaim

    from hpsearch.driver.ledger import EXPIRE_S

    return LedgerClient(SweepClaim(
        sweep_id=f"{sweep}#{uuid.uuid4().hex[:8]}", name=sweep.name,
        demand=spec.resources.per_trial(), want=slots or spec.trials.num,
        weight=spec.resources.share, registered=time.time(),
        expire_s=float(os.environ.get("HPSEARCH_LEDGER_EXPIRE_S", EXPIRE_S))))


def new_tuner(run: SweepRun, plan: Plan) -> Any:
    """The Tuner of a new sweep: Optuna searcher, ASHA or FIFO, the runner's trainable."""
    import optuna
    from ray import tune

    from hpsearch.driver.budget import may_start_trial
    from hpsearch.driver.search import make_scheduler, make_searcher

    spec, sweep, runner = run.spec, run.sweep, run.runner
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from hpsearch.driver.searcher import open_study_storage

    searcher = make_searcher(
        spec, storage=open_study_storage(sweep), study_name=sweep.name, sweep=str(sweep),
        may_start=functools.partial(may_start_trial, str(sweep)),
    )
    return tune.Tuner(
        runner.trainable(sweep),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=make_scheduler(spec, sweep=str(sweep)),
            num_samples=-1,  # the search ends by StartLimits (driver/budget.py): extensible
            max_concurrent_trials=plan.slots,
            time_budget_s=run.time_budget_s,
            reuse_actors=runner.reuse_actors,
        ),
        run_config=tune.RunConfig(
            name=SweepDir.new_tune_name(),
            storage_path=os.fspath(sweep.path),
            callbacks=run.callbacks,
            stop=run.stopper,
            verbose=2 if run.verbose else 0,
            failure_config=tune.FailureConfig(max_failures=runner.tune_max_failures),
        ),
    )


def fit(tuner: Any, run: SweepRun, plan: Plan, manifest: dict) -> SweepResult:
    """Run ``tuner`` to its end; write the tables and the manifest however it ends.

    Raises:
        Interrupted: Ctrl-C; the tables are written and the sweep can be resumed.
        StorageError: A table could not be written (the last whole copy is on disk).
    """
    from hpsearch.store.tables import write_tables

    spec, sweep = run.spec, run.sweep
    status = "finished"
    sentinel = _InterruptSentinel()
    try:
        run.runner.open(sweep, slots=plan.slots)
        with sentinel, _tune_loggers():
            tuner.fit()
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        run.runner.close()  # warm worker groups go before the tables are written
        run.progress.close()
        run.limits.close()  # the share goes back to the other sweeps at once
        from hpsearch.driver import live

        live.clear()  # Tune's objects are done; a later sweep in this process starts clean
    if sentinel.fired:
        status = "interrupted"
    else:  # the time budget or the all-failed stop ended the sweep around these trials
        from hpsearch.driver.repairs import settle_study

        run.records.stop_unfinished()
        settle_study(sweep, run.records)  # the study and the table agree, trial for trial
        run.tables.prune()
    try:
        write_tables(run.records, sweep)
    finally:
        counts = run.records.counts()
        if status == "finished" and run.watch.diagnosis:
            status = "stalled"
        if status == "finished" and run.ended_by_deadline():
            status = "deadline"
        if status == "finished" and run.stopper.all_failed(run.records):
            status = "all_failed"
        if status == "finished" and not any(counts.get(s) for s in st.WITH_RESULT):
            status = "no_trial_completed"
        manifest.update(status=status, ended_at=now_iso(), counts=counts)
        manifest["runs"][-1]["ended_at"] = manifest["ended_at"]
        write_manifest(sweep, manifest)
    if run.tables.storage_error is not None:
        raise run.tables.storage_error
    result = SweepResult(sweep.path, status, plan, best=run.records.best(), counts=counts)
    if status == "stalled":
        raise SweepStalledError(
            f"the sweep stalled and was stopped: {run.watch.diagnosis}. The tables in {sweep} "
            f"are up to date; free the resources, then `hpsearch resume {sweep.name} "
            f"--storage {sweep.storage}`."
        )
    if status == "interrupted":
        raise Interrupted(
            f"interrupted: the tables in {sweep} are up to date. "
            f"Continue with `hpsearch resume {sweep.name} --storage {sweep.storage}`."
        )
    return result


#: Set to 1 in the driver's environment for Tune's TensorBoard event files in each trial's
#: folder, as plain Ray Tune writes them.
TENSORBOARD_ENV = "HPSEARCH_TENSORBOARD"


@contextlib.contextmanager
def _tune_loggers():
    """Tune without its automatic loggers while the sweep runs, unless ``TENSORBOARD_ENV``.

    Tune adds a CSV, a JSON and a TensorBoard logger to every run that lacks them. The
    trial tables hold what the TensorBoard files would (every report, in ``history``), and
    writing them was the largest cost a sweep of short trials paid per report: 11-12 s of
    a 2,000-trial sweep's 40-65 s of driver time (``benchmarks/scale.py``, sampled with
    py-spy). :attr:`SweepRun.callbacks` gives the CSV and JSON loggers itself. Tune reads
    the variable once, as ``fit`` starts, and it is put back as it was after."""
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
