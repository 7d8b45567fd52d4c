"""Keeps a running sweep's trial tables current: the view of its record.

The study journal is where a trial's end becomes durable (the searcher flushes it when a
trial ends). ``trials.parquet`` and ``history.parquet`` are written from the records at
most every ``interval_s`` seconds while anything changes, and at the end of the sweep,
each write after flushing the journal, so the tables never name a trial that a power cut
could take from the study. A resume rebuilds what the tables missed from the study
(:mod:`hpsearch.driver.sweep.record`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ray.tune import Callback

from hpsearch.driver.search.ids import hpsearch_id
from hpsearch.errors import StorageError
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.retention import CheckpointPruner
from hpsearch.store.tables import write_tables

__all__ = ["TablesCallback", "last_error_line"]


class TablesCallback(Callback):
    """Feeds the records from Tune's events and writes the tables.

    Args:
        records: The sweep's records.
        sweep: Its directory.
        journal: The study's journal, flushed before each write (``None``: nothing to flush).
        interval_s: The most often the tables are written while trials run.
        disk: The full-disk watch: told of a write the disk refused; the rows of the
            trials it paused stay running.

    Attributes:
        storage_error: The last write's failure, cleared by a write that succeeds.
        writes: Writes so far.
    """

    def __init__(self, records: TrialRecords, sweep: SweepDir, *, journal: Any = None,
                 interval_s: float = 2.0, disk: Any = None):
        self.records = records
        self.disk = disk
        self.sweep = sweep
        self.journal = journal
        self.interval_s = interval_s
        self.last_write = 0.0
        self.written_version = -1
        self.storage_error: StorageError | None = None
        self.writes = 0
        self._pruner = CheckpointPruner()

    def flush(self, *, force: bool = False) -> None:
        """Write the tables if anything changed since the last write (and ``interval_s``
        has passed, unless ``force``)."""
        now = time.monotonic()
        version = self.records.version
        if version == self.written_version or (not force and now - self.last_write < self.interval_s):
            return
        self.last_write = now
        try:
            if self.journal is not None:
                self.journal.sync()
            write_tables(self.records, self.sweep)
            self.written_version = version
            self.storage_error = None  # the tables on disk are whole and current again
        except StorageError as exc:  # keep going; the driver raises it at the end
            self.storage_error = exc
        except OSError as exc:  # the journal could not be flushed
            self.storage_error = StorageError(
                f"cannot flush the study journal in {self.sweep}: {exc.strerror or exc}",
                errno=exc.errno)
        if self.storage_error is not None and self.disk is not None:
            self.disk.note("writing the trial tables", self.storage_error)
        self.writes += 1

    def prune(self) -> None:
        """Delete the checkpoints of ended trials outside the best ones kept."""
        try:
            self._pruner.prune(self.records, self.sweep)
        except OSError:  # a checkpoint we cannot delete must not stop the sweep
            pass

    def on_trial_start(self, iteration, trials, trial, **info):
        self.records.start(hpsearch_id(trial), trial.config)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.records.result(hpsearch_id(trial), result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        trial_id = hpsearch_id(trial)
        self.records.end(trial_id, returned=True)  # the searcher has ended it already
        checkpoint = getattr(trial, "checkpoint", None)
        self.records.annotate(trial_id, checkpoint=checkpoint.path if checkpoint else None)
        self.prune()

    def on_trial_error(self, iteration, trials, trial, **info):
        trial_id = hpsearch_id(trial)
        if self.disk is not None and trial_id in self.disk.paused:
            return  # the disk stopped it, not its code: its row stays running
        self.records.end(trial_id, errored=True)
        self.records.annotate(trial_id, error=last_error_line(trial))
        self.prune()

    def on_step_end(self, iteration, trials, **info):
        self.flush()

    def on_experiment_end(self, trials, **info):
        self.flush(force=True)


def last_error_line(trial: Any) -> str | None:
    """The exception's last meaningful line from the trial's error file; a message that
    goes on below its line (``...Error: Training failed due to controller error:``) takes
    its next line along."""
    path = getattr(trial, "error_file", None)
    if not path or not os.path.exists(path):
        return None
    lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("File ", "^", "~"))]
    for i in range(len(lines) - 1, -1, -1):
        if "Error" in lines[i] or "Exception" in lines[i]:
            line = lines[i]
            if line.endswith(":") and i + 1 < len(lines):
                line = f"{line} {lines[i + 1]}"
            return line[:500]
    return lines[-1][:500] if lines else None
