"""The Optuna searcher as a sweep runs it: Ray Tune's ``OptunaSearch``, made safe to resume.

Tune pickles the searcher with the experiment; this class is importable by name so that a
restored experiment finds it.
"""

from __future__ import annotations

import optuna
from ray.tune.search.optuna import OptunaSearch

__all__ = ["SweepSearcher"]


class SweepSearcher(OptunaSearch):
    """``OptunaSearch`` that never starts more trials than planned and survives a resume.

    ``may_start`` is asked before each new trial. Tune saves the searcher only now and
    then: a trial that finished after the last save is finished in the Optuna database but
    unfinished in the restored state, so Tune runs it again and its reports would update a
    finished Optuna trial, which raises and ends the whole sweep. Such reports are dropped:
    Optuna already has that trial's result.
    """

    may_start = None

    def suggest(self, trial_id):  # noqa: ANN001
        if self.may_start is not None and not self.may_start():
            return OptunaSearch.FINISHED
        return super().suggest(trial_id)

    def on_trial_result(self, trial_id, result):  # noqa: ANN001
        try:
            super().on_trial_result(trial_id, result)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass
