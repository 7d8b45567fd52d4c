"""ASHA as a sweep runs it: Ray Tune's ``ASHAScheduler``, plus a note of whom it stopped.

Tune tells callbacks that a trial completed, not why. ASHA stopping a trial at a rung and
a trial returning on its own before ``max_t`` look the same there, so the scheduler marks
the trials it stops early in the sweep's live records. Tune pickles the scheduler with
the experiment; it holds the sweep's path, not the records.
"""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from hpsearch.driver import live

__all__ = ["SweepASHA"]


class SweepASHA(ASHAScheduler):
    """``ASHAScheduler`` that records the trials it stops before ``max_t``."""

    def __init__(self, *, sweep: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.sweep = sweep

    def on_trial_result(self, tune_controller, trial, result):  # noqa: ANN001
        action = super().on_trial_result(tune_controller, trial, result)
        reached = result.get(self._time_attr)
        if action == TrialScheduler.STOP and reached is not None and reached < self._max_t:
            records = live.records(self.sweep) if self.sweep else None
            if records is not None:
                records.stopped_by_scheduler(trial.trial_id)
        return action
