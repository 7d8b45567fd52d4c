"""Feeds a running sweep's record from Tune's events and keeps its tables current.

:class:`TablesCallback` is Tune's side of the record
(:class:`~hpsearch.driver.record.sweep_record.SweepRecord`): a trial's start and each of
its reports reach its row here, what is learnt after its end (the error's line, its last
checkpoint) is added here, and the tables are written at most every few seconds while
anything changes, and at the end of the sweep (:meth:`SweepRecord.flush`). The searcher
ends trials; nothing here does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ray.tune import Callback

from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.ids import hpsearch_id

__all__ = ["TablesCallback", "last_error_line"]


class TablesCallback(Callback):
    """Tune's events into the sweep's record, and its tables written.

    Args:
        record: The sweep's record.
    """

    def __init__(self, record: SweepRecord):
        self.record = record

    def on_trial_start(self, iteration, trials, trial, **info):
        self.record.start(hpsearch_id(trial), trial.config)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.record.report(hpsearch_id(trial), result)

    def on_trial_complete(self, iteration, trials, trial, **info):
        checkpoint = getattr(trial, "checkpoint", None)
        self.record.annotate(hpsearch_id(trial),
                             checkpoint=checkpoint.path if checkpoint else None)
        self.record.prune()

    def on_trial_error(self, iteration, trials, trial, **info):
        self.record.annotate(hpsearch_id(trial), error=last_error_line(trial))
        self.record.prune()

    def on_step_end(self, iteration, trials, **info):
        self.record.flush()

    def on_experiment_end(self, trials, **info):
        self.record.flush(force=True)


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
