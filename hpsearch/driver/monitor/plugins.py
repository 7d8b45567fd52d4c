"""A run's watchers, built together in one operation (:class:`Monitors`).

Each watcher is a Tune callback of its own module; this is where a run gets all of them,
wired to each other the one way they work together: every line goes through the progress
line, the full-disk watch is a watcher of the record, and the one stopper ends the run on
what the stall and disk watches see.
"""

from __future__ import annotations

from typing import Any, TextIO

from hpsearch.driver.monitor.disk import DiskWatch
from hpsearch.driver.monitor.housekeeping import Housekeeping, Shares, WorkerGroups
from hpsearch.driver.monitor.progress import ProgressCallback
from hpsearch.driver.monitor.quiet import QuietTrials
from hpsearch.driver.monitor.stall import StallWatch
from hpsearch.driver.monitor.stops import SweepStopper
from hpsearch.driver.monitor.tables import TablesCallback
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.ids import hpsearch_id

__all__ = ["Monitors"]


class Monitors:
    """The watchers of one run of a sweep.

    Args:
        record: The sweep's record (the disk watch becomes one of its watchers).
        runner: The run's runner (its warm worker groups, for housekeeping).
        admission: The run's admission (its share of a shared cluster, for housekeeping).
        deadline_at: The deadline in epoch seconds, or ``None`` (for the stopper).
        stream: Where the progress line goes.

    Attributes:
        progress: The live status line; :meth:`say` prints a line through it.
        disk: The full-disk watch.
        tables: Feeds the record Tune's events; writes the trial tables.
        stall: What the sweep waits for when nothing happens.
        quiet: Trials that stopped reporting.
        housekeeping: Leaked placement groups; warm groups beyond the share.
        stopper: The run's one stopper (Ctrl-C, a full disk, all failed, stalled,
            deadline, time budget, a missing metric).
    """

    def __init__(self, record: SweepRecord, runner: WorkerGroups, admission: Shares, *,
                 deadline_at: float | None, stream: TextIO):
        spec, rows = record.spec, record.rows
        # The disk watch says a full disk once; the trials it pauses are not retries.
        self.progress = ProgressCallback(rows, spec, stream=stream,
                                         paused=lambda trial_id: trial_id in self.disk.paused)
        self.disk = DiskWatch(record.sweep, say=self.say)
        record.watch(self.disk)
        self.tables = TablesCallback(record)
        self.stall = StallWatch(rows, self.say)
        self.quiet = QuietTrials(self.say, trial_id=hpsearch_id,
                                 hung_after_s=spec.trials.hung_after_s)
        self.housekeeping = Housekeeping(runner, admission)
        self.stopper = SweepStopper(rows, all_failed_after=min(spec.trials.num, 3),
                                    watch=self.stall, time_budget_s=spec.budget.time_s,
                                    deadline_at=deadline_at, disk=self.disk,
                                    problem=lambda: record.problem)

    def say(self, line: str) -> None:
        """Print ``line`` above the progress line (or as a timestamped log line)."""
        self.progress.log(line)

    def callbacks(self) -> list[Any]:
        """Tune's callbacks, in the order Tune calls them: the tables before the progress
        line, which reads the rows the tables callback has just updated."""
        return [self.disk, self.tables, self.progress, self.stall, self.quiet,
                self.housekeeping]

    def close(self) -> None:
        """The progress line's last state printed; nothing is watched after."""
        self.progress.close()
