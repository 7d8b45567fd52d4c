"""The Ray Tune callbacks of a sweep: keep the trial tables current and print progress.

Both only feed or read :class:`hpsearch.store.records.TrialRecords`; the logic lives in
``store/`` and is tested there without Ray. Tune pickles its RunConfig, callbacks
included, with the experiment state, so each callback drops what cannot be pickled
(streams, a live display); a resumed sweep builds fresh ones anyway.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, TextIO

from ray.tune import Callback
from ray.tune.stopper import Stopper

from hpsearch.driver import live
from hpsearch.errors import StorageError
from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.retention import CheckpointPruner
from hpsearch.store.summary import fmt_value, printable, status_line
from hpsearch.store.tables import write_tables

__all__ = ["AllFailedStopper", "Janitor", "ProgressCallback", "StallWatch", "TablesCallback",
           "describe_waiting"]


class TablesCallback(Callback):
    """Writes ``trials.parquet`` / ``history.parquet`` at most every ``interval_s`` while
    results arrive, and when a trial ends.

    A trial's end is written at once while table writes have taken less than
    ``write_share`` of the driver's time (a budget that refills at that rate, up to
    ``burst_s`` of writing). When trials end faster than that, as in a sweep of
    thousands of trials of a few seconds, ends are gathered and written together at the
    end of a controller step once the budget allows, and never later than
    ``max_delay_s`` after the first of them: a row then lands a fraction of a second
    late, and writing the tables takes about ``write_share`` of the driver (Ray Tune
    caps its own experiment-state saves at 5% the same way; 2% here, because a flood of
    ends is bounded by ``max_delay_s`` anyway and each write replaces the trial table).
    Either way a trial's result is on disk when it ends: the study's journal flushes
    its value to disk at once (:class:`~hpsearch.driver.searcher.TrialEndSyncedJournal`).
    If the driver is killed before the table write, the resumed sweep ends the row from
    Tune's saved state when that state saw the end (:meth:`_end_rows_tune_ended`), and
    otherwise runs the trial again; the study is never told twice.

    Each step costs what changed, not the size of the sweep, and so does each write of the
    history, the table that grows (:func:`write_tables` appends the new reports); the
    checkpoint pruner ranks only the trials that ended since (:class:`CheckpointPruner`),
    and Tune's trials are followed as they are added and end (:class:`_TuneTrials`)."""

    _tune: "_TuneTrials | None" = None  # not pickled: Tune's trial objects
    _pruner: CheckpointPruner | None = None

    def __init__(self, records: TrialRecords, sweep: SweepDir, *, interval_s: float = 5.0,
                 write_share: float = 0.02, burst_s: float = 0.5, max_delay_s: float = 2.0):
        live.register(sweep, records)
        self.records = records
        self.sweep = sweep
        self.interval_s = interval_s
        self.write_share = write_share
        self.burst_s = burst_s
        self.max_delay_s = max_delay_s
        self.last_write = 0.0
        self.written_version = -1
        self.reconciled = False
        self.storage_error: StorageError | None = None
        self.budget_s = burst_s  # seconds of writing allowed now
        self.budget_at = time.monotonic()
        self.held: list[float] = []  # when each trial end not written yet happened
        self.writes = 0
        self.held_ends = 0  # trial ends written later than they happened, in all

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_tune", None)
        state.pop("_pruner", None)
        return state

    def _budget(self) -> float:
        """Seconds of writing the budget allows now (refilled since it was last looked at)."""
        now = time.monotonic()
        self.budget_s = min(self.burst_s, self.budget_s + (now - self.budget_at) * self.write_share)
        self.budget_at = now
        return self.budget_s

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_write < self.interval_s:
            return
        self.last_write = now
        version = self.records.version
        try:
            write_tables(self.records, self.sweep)
            self.written_version = version
            self.storage_error = None  # the tables on disk are whole and current again
        except StorageError as exc:  # keep going; the driver raises it at the end
            self.storage_error = exc
        self._budget()
        self.budget_s -= time.monotonic() - now
        self.held_ends += len(self.held)
        self.held.clear()
        self.writes += 1

    def _trial_ended(self) -> None:
        """Write now if the budget allows, else at a later step's end."""
        if self._budget() > 0:
            self.flush(force=True)
        else:
            self.held.append(time.monotonic())

    def _write_held(self) -> None:
        if self._budget() > 0 or time.monotonic() - self.held[0] >= self.max_delay_s:
            self.flush(force=True)

    def prune(self) -> None:
        if self._pruner is None:
            self._pruner = CheckpointPruner()
        try:
            self._pruner.prune(self.records, self.sweep)
        except OSError:  # a checkpoint we cannot delete must not stop the sweep
            pass

    def on_step_begin(self, iteration, trials, **info):
        if self._tune is None:
            self._tune = _TuneTrials()
        tune = self._tune
        if tune.update(trials, self.records.trials):
            live.note_tune_trials(self.sweep, tune.ids, active=tune.active)
        limits = live.limits()
        if limits is not None:
            limits.note_tune(outside=tune.outside)
            limits.heartbeat()
        if not self.reconciled:  # first step of a (resumed) run: Tune's trials are known
            self.reconciled = True
            self.records.forget_unfinished_except(tune.ids)
            self._end_rows_tune_ended(trials)

    def _end_rows_tune_ended(self, trials: list) -> None:
        """End the rows of trials that a resumed Tune holds as ended but the tables do not:
        the killed driver saved Tune's state after their end and died before the table
        write it had held back (:meth:`_trial_ended`). Their last result is Tune's."""
        for trial in trials:
            row = self.records.trials.get(trial.trial_id)
            if row is None or trial.status not in _TuneTrials.ENDED or \
                    row.get("status") in st.ENDED:
                continue
            if trial.last_result:
                self.records.result(trial.trial_id, trial.last_result)
            errored = trial.status == "ERROR"
            self.records.end(trial.trial_id, errored=errored, returned=not errored,
                             error=_last_error_line(trial) if errored else None,
                             checkpoint=trial.checkpoint.path if trial.checkpoint else None)

    def on_trial_recover(self, iteration, trials, trial, **info):
        if self._tune is not None:
            self._tune.rescan = True  # Tune moved the retried trial to the end of its list

    def on_trial_start(self, iteration, trials, trial, **info):
        self.records.start(trial.trial_id, trial.config)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.records.result(trial.trial_id, result)
        self.flush()

    def on_trial_complete(self, iteration, trials, trial, **info):
        ckpt = trial.checkpoint.path if trial.checkpoint else None
        self.records.end(trial.trial_id, checkpoint=ckpt, returned=True)
        self.prune()
        self._trial_ended()

    def on_trial_error(self, iteration, trials, trial, **info):
        if self._tune is not None:
            self._tune.rescan = True
        self.records.end(trial.trial_id, errored=True, error=_last_error_line(trial))
        self.prune()
        self._trial_ended()

    def on_step_end(self, iteration, trials, **info):
        # Ends the budget held back, and a result that arrived within interval_s of the
        # last write, are written here, not whenever the next event happens to come.
        if self.held:
            self._write_held()
        elif self.records.version != self.written_version:
            self.flush()

    def on_experiment_end(self, trials, **info):
        self.flush(force=True)


class _TuneTrials:
    """Tune's trials as the driver's limits need them: their ids, how many have not ended
    (:func:`live.note_tune_trials`), and those without a row yet (:meth:`StartLimits.known`).

    Kept up to date at each step in the time of what changed: Tune's list of trials only
    grows, and an ended trial (``TERMINATED``, ``ERROR``) stays ended within a run. Tune
    moves a trial it retries to the end of the list; after that (``rescan``) the list is
    read whole once.
    """

    ENDED = ("TERMINATED", "ERROR")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.count = 0  # length of Tune's list when last read
        self.unfinished: list = []  # Tune's trials that have not ended
        self.outside: set[str] = set()  # ids of Tune's trials without a row
        self.active = 0
        self.rescan = True

    def update(self, trials: list, rows: Mapping[str, Any]) -> bool:
        """Read what changed in ``trials``; whether the ids or the active count did."""
        changed = False
        if self.rescan or len(trials) < self.count:
            self.ids = {t.trial_id for t in trials}
            self.unfinished = [t for t in trials if t.status not in self.ENDED]
            self.outside = {tid for tid in self.ids if tid not in rows}
            self.rescan, changed = False, True
        elif len(trials) > self.count:
            for t in trials[self.count:]:
                self.ids.add(t.trial_id)
                self.unfinished.append(t)
                if t.trial_id not in rows:
                    self.outside.add(t.trial_id)
            changed = True
        self.count = len(trials)
        if any(t.status in self.ENDED for t in self.unfinished):
            self.unfinished = [t for t in self.unfinished if t.status not in self.ENDED]
        if self.outside:
            self.outside = {tid for tid in self.outside if tid not in rows}
        if len(self.unfinished) != self.active:
            self.active, changed = len(self.unfinished), True
        return changed


def _last_error_line(trial) -> str | None:
    """The exception's last meaningful line from Tune's error file."""
    path = getattr(trial, "error_file", None)
    if not path or not os.path.exists(path):
        return None
    lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("File ", "^", "~"))]
    for line in reversed(lines):
        if "Error" in line or "Exception" in line:
            return line[:500]
    return lines[-1][:500] if lines else None


class ProgressCallback(Callback):
    """Progress for people. On a terminal: one live line (rich) with counts, the best value
    and config, elapsed and estimated remaining time. Otherwise (logs of overnight runs):
    plain timestamped lines, one per trial event and a heartbeat every ``heartbeat_s``."""

    render_every_s = 0.5  # the live line's refresh (rich refreshes twice a second)
    last_render = 0.0  # class defaults: a callback pickled before them still restores

    def __init__(self, records: TrialRecords, spec: Spec, *, stream: TextIO | None = None,
                 heartbeat_s: float = 30.0, live: bool | None = None):
        self.records = records
        self.spec = spec
        self.stream = stream or sys.stdout
        self.heartbeat_s = heartbeat_s
        self.t0 = self.last_beat = time.monotonic()
        self.started_at = time.time()
        self._want_live = self.stream.isatty() if live is None else live
        self._live = None

    def setup(self, **info):
        # Started here, not in __init__: if building the Tuner fails, no live display is
        # left running with the cursor hidden.
        self.t0 = self.last_beat = time.monotonic()
        self.started_at = time.time()
        if self._want_live and self.stream is not None:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self._render(), console=Console(file=self.stream),
                              refresh_per_second=2)
            self._live.start()

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(stream=None, _live=None)
        return state

    def _render(self):
        from rich.text import Text

        return Text(self._status())

    def _status(self) -> str:
        return status_line(self.records, self.spec, elapsed=time.monotonic() - self.t0,
                           started_at=self.started_at)

    def log(self, message: str) -> None:
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        if self._live is not None:
            from rich.markup import escape  # a "[...]" in a value is text, not markup

            self._live.console.print(f"[dim]{stamp}[/dim] {escape(message)}", highlight=False,
                                     markup=True)
            self._live.update(self._render())
        elif self.stream is not None:
            print(f"{stamp} {message}", file=self.stream, flush=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        cfg = ", ".join(f"{k}={fmt_value(v)}" for k, v in trial.config.items())
        self.log(f"trial {trial.trial_id} started: {cfg}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        row = self.records.trials.get(trial.trial_id, {})
        if row.get("status") == st.FAILED:  # ran, but never reported its objective
            self.log(f"trial {trial.trial_id} failed: {printable(row.get('error'))}")
            return
        unit = self.spec.scheduler.time_attr
        where = (f"after {fmt_value(row.get('wall_s'))} s" if unit == "time"
                 else f"at {unit} {fmt_value(row.get(unit + 's'))}")
        self.log(
            f"trial {trial.trial_id} {row.get('status', 'ended')} {where}: "
            f"{printable(self.spec.objective.metric)} "
            f"{fmt_value(row.get('final_value'))} (best {fmt_value(row.get('best_value'))})"
        )

    def on_trial_error(self, iteration, trials, trial, **info):
        row = self.records.trials.get(trial.trial_id, {})
        where = os.path.join(trial.path, "error.txt") if trial.path else "its error.txt"
        self.log(f"trial {trial.trial_id} failed: {printable(row.get('error') or 'unknown error')} "
                  f"(traceback: {where})")

    def on_step_end(self, iteration, trials, **info):
        now = time.monotonic()
        if self._live is not None:
            # The status line reads every row (best value, throughput): at the display's
            # own refresh rate, not at every step of Tune's loop (many a second).
            if now - self.last_render >= self.render_every_s:
                self.last_render = now
                self._live.update(self._render())
        elif now - self.last_beat >= self.heartbeat_s:
            self.last_beat = now
            self.log(self._status())

    def on_experiment_end(self, trials, **info):
        self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
            self._live = None


class AllFailedStopper(Stopper):
    """Stops the whole sweep once its first trials have all failed: the same bug would fail
    every later trial, so don't spend the budget finding that out."""

    def __init__(self, records: TrialRecords, sweep: SweepDir, *, threshold: int):
        live.register(sweep, records)
        self.sweep = str(sweep)
        self.threshold = threshold

    def __call__(self, trial_id, result):
        return False

    def all_failed(self, records: TrialRecords | None = None) -> bool:
        """Whether the first ``threshold`` trials to end all failed.

        Args:
            records: The sweep's records; by default the live ones (the driver's end
                clears those, so it passes its own).
        """
        records = records if records is not None else live.records(self.sweep)
        if records is None:
            return False
        # Asked at every step of Tune's loop: from the counts, which cost what changed.
        counts = records.counts()
        ended = sum(n for status, n in counts.items() if status in st.ENDED)
        return ended >= self.threshold and counts.get(st.FAILED, 0) == ended

    def stop_all(self) -> bool:
        watch = live.watch(self.sweep)
        return self.all_failed() or (watch is not None and watch.should_stop())


#: Seconds without a trial starting, reporting or ending, with resource requests pending,
#: before the sweep says what it waits for, and before it gives up (docs/cluster.md).
STALL_WARN_S, STALL_FAIL_S = 120.0, 900.0


class StallWatch(Callback):
    """Never a silent hang. When trials are running but none has started, reported or
    ended for ``warn_s`` seconds while resource requests (placement groups) are pending,
    it prints what the sweep waits for and what holds it; after ``fail_s`` seconds it
    stops the sweep, and :attr:`diagnosis` says why."""

    def __init__(self, records: TrialRecords, log, *, warn_s: float | None = None,
                 fail_s: float | None = None, check_every_s: float = 5.0):
        self.records = records
        self.log = log
        self.warn_s = warn_s if warn_s is not None else float(
            os.environ.get("HPSEARCH_STALL_WARN_S", STALL_WARN_S))
        self.fail_s = fail_s if fail_s is not None else float(
            os.environ.get("HPSEARCH_STALL_FAIL_S", STALL_FAIL_S))
        check_every_s = min(check_every_s, self.warn_s / 2)
        self.check_every_s = check_every_s
        self.last_activity = self.last_check = time.monotonic()
        self.warned = False
        self.diagnosis: str | None = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["log"] = None
        return state

    def _active(self, *args, **kwargs):
        self.last_activity = time.monotonic()
        self.warned = False

    on_trial_start = on_trial_result = on_trial_complete = on_trial_error = _active

    def setup(self, **info):
        self.last_activity = time.monotonic()

    def should_stop(self) -> bool:
        return self.diagnosis is not None

    def on_step_end(self, iteration, trials, **info):
        now = time.monotonic()
        if now - self.last_check < self.check_every_s or self.diagnosis is not None:
            return
        self.last_check = now
        idle = now - self.last_activity
        waiting_trials = any(t.status in ("PENDING", "RUNNING") for t in trials)
        if idle < self.warn_s or not (waiting_trials or self.records.unfinished()):
            return
        waiting = describe_waiting()
        if waiting is None:  # nothing is pending: trials are simply slow to report
            return
        if idle >= self.fail_s:
            self.diagnosis = (f"no trial started, reported or ended for {idle:.0f} s while "
                              f"{waiting}")
        elif not self.warned and self.log is not None:
            self.warned = True
            self.log(f"waiting {idle:.0f} s: {waiting}. The sweep gives up after "
                     f"{self.fail_s:.0f} s (HPSEARCH_STALL_FAIL_S).")


def describe_waiting() -> str | None:
    """What the cluster's pending resource requests wait for and what holds the resources,
    in one line; ``None`` when nothing is pending."""
    import ray
    from ray.util import placement_group_table

    groups = list(placement_group_table().values())
    pending = [g for g in groups if g.get("state") == "PENDING"]
    if not pending:
        return None
    want = _sum_bundles(pending)
    held = [g for g in groups if g.get("state") == "CREATED"]
    holders = []
    for g in held:
        name = g.get("name") or g.get("placement_group_id", "")[:8]
        holders.append(f"{name} ({_fmt_resources(_sum_bundles([g]))})")
    total = ray.cluster_resources()
    free = ray.available_resources()
    return (f"{len(pending)} resource request(s) wait for {_fmt_resources(want)}; the cluster "
            f"has {_fmt_resources(free, only=want)} free of {_fmt_resources(total, only=want)}"
            + (f", held by placement group(s) {', '.join(holders[:6])}" if holders else "")
            + ". A failed or leaked trial may hold them: see `ray status` and "
            "`ray list placement-groups`")


def _sum_bundles(groups) -> dict[str, float]:
    out: dict[str, float] = {}
    for g in groups:
        for bundle in (g.get("bundles") or {}).values():
            for key, value in bundle.items():
                if key in ("CPU", "GPU") or not key.startswith(("node:", "bundle_group", "memory")):
                    out[key] = out.get(key, 0.0) + float(value)
    return out


def _fmt_resources(resources, only=None) -> str:
    keys = list(only) if only else [k for k in resources if k in ("CPU", "GPU")]
    return ", ".join(f"{resources.get(k, 0):g} {k}" for k in keys) or "nothing"


class Janitor(Callback):
    """Gives back what a dead Ray Train controller held: once a second, and when a trial
    fails and when the experiment ends, it removes the sweep's orphaned placement groups
    (:func:`hpsearch.driver.repairs.reap_orphan_placement_groups`), so a trial that
    failed in any way never holds the cluster.

    Only trials that run a Ray Train worker group can leave such a group. A sweep whose
    trials train in their own Tune actor (``worker_groups=False``: the in-process runner)
    skips the scan once a second, which reads the cluster's whole placement-group table
    (one group per Tune trial, so it grows with the sweep); it still scans when a trial
    fails and at the end, which cost nothing per trial.
    """

    def __init__(self, *, every_s: float = 1.0, worker_groups: bool = True):
        self.every_s = every_s
        self.worker_groups = worker_groups
        self.last = 0.0
        self.removed: list[str] = []

    def reap(self) -> None:
        from hpsearch.driver.repairs import reap_orphan_placement_groups

        self.last = time.monotonic()
        try:
            self.removed += reap_orphan_placement_groups()
        except Exception:  # noqa: BLE001 - housekeeping must never end a sweep
            pass

    def on_step_begin(self, iteration, trials, **info):
        if self.worker_groups and time.monotonic() - self.last >= self.every_s:
            self.reap()

    def on_trial_error(self, iteration, trials, trial, **info):
        self.reap()

    def on_experiment_end(self, trials, **info):
        self.reap()


class WarmGroupsCallback(Callback):
    """Keeps a sweep's warm worker groups (:mod:`hpsearch.driver.warm`) in step with Tune
    and the ledger: a trial Tune ended frees its group at once (its Tune trial may have
    been killed before it could say so), and the pool holds no more groups than the
    sweep's current share of the cluster."""

    def __init__(self, runner, sweep: str, *, every_s: float = 1.0):
        self.runner = runner
        self.sweep = sweep
        self.every_s = every_s
        self.last = 0.0
        self.slots: int | None = None

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.runner.trial_ended(trial.trial_id)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.runner.trial_ended(trial.trial_id)

    def on_step_end(self, iteration, trials, **info):
        if time.monotonic() - self.last < self.every_s:
            return
        self.last = time.monotonic()
        from hpsearch.driver import live

        limits = live.limits(self.sweep)
        if limits is None or limits.ledger is None:
            return
        slots = min(limits.slots, max(0, limits.ledger.share))
        if slots != self.slots:
            self.slots = slots
            try:
                self.runner.set_slots(slots)
            except Exception:  # noqa: BLE001 - housekeeping must never end a sweep
                pass
