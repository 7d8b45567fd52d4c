"""The schedulers a sweep runs: Ray Tune's ASHA and FIFO, plus two things Tune lacks.

* Whom ASHA stopped. Tune tells callbacks that a trial completed, not why. ASHA stopping
  a trial at a rung and a trial returning on its own before ``max_t`` look the same
  there, so the scheduler marks the trials it stops early in the sweep's live records.
* Giving a share back. Tune keeps a finished trial's actor for the next trial
  (``reuse_actors``). When the sweep's share of a shared cluster shrinks
  (:mod:`hpsearch.driver.ledger`) and it may not start a trial now, or it has no trial
  left to start, such an idle actor
  would hold its CPU or GPU from the other sweeps; the scheduler, which Tune asks at every
  step, releases idle actors then.

Tune pickles the scheduler with the experiment; it holds the sweep's path, not the
records.
"""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from hpsearch.driver import live

__all__ = ["SweepASHA", "SweepFIFO"]


class _GivesShareBack:
    """Releases Tune's idle cached actors while the sweep waits for its share."""

    def choose_trial_to_run(self, tune_controller):  # noqa: ANN001
        limits = live.limits()
        if limits is not None and limits.waiting_for_share:
            from hpsearch.driver.repairs import release_idle_actors

            release_idle_actors(tune_controller)
        return super().choose_trial_to_run(tune_controller)


class SweepFIFO(_GivesShareBack, FIFOScheduler):
    """``FIFOScheduler`` that gives idle actors back on a shared cluster."""

    def __init__(self, *, sweep: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.sweep = sweep


class SweepASHA(_GivesShareBack, ASHAScheduler):
    """``ASHAScheduler`` that records the trials it stops before ``max_t`` and gives idle
    actors back on a shared cluster."""

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
