"""A trial's hpsearch id, whatever Tune calls the trial.

Tune names each trial it creates; a resumed sweep's unfinished trials come back as new
Tune trials. The hpsearch id is the trial's name in the record (its row, its Optuna
trial's ``trial_id``, its checkpoints, its Tune folder): a new trial takes the id Tune
gave it, a continued one keeps its own, and the config carries it (:data:`TRIAL_ID_KEY`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TRIAL_ID_KEY", "hpsearch_id"]

#: The config key that carries a trial's hpsearch id.
TRIAL_ID_KEY = "hpsearch_trial_id"


def hpsearch_id(trial: Any) -> str:
    """The hpsearch id of a Tune trial: the one its config carries, else Tune's own."""
    config = getattr(trial, "config", None) or {}
    return config.get(TRIAL_ID_KEY) or trial.trial_id
