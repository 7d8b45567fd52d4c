"""Bounded disk: which checkpoints a sweep keeps.

* A running trial keeps its newest ``checkpoints.keep`` checkpoints (Tune's and Ray
  Train's ``CheckpointConfig(num_to_keep=...)`` delete older ones as new ones arrive).
* A trial that has ended (completed, stopped by ASHA, diverged, failed) can never be
  promoted again: ASHA in hpsearch is asynchronous and stops for good. Its checkpoints are
  deleted at once unless it is among the sweep's ``checkpoints.keep_best_trials`` best
  ended trials; a trial pushed out of that top by a better one loses them then.

So at any moment a sweep holds at most ``(slots + keep_best_trials) * keep`` checkpoints.
Every path deleted is built by :class:`SweepDir` from a checked trial id and deleted
through its fence.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from hpsearch.space.spec import Objective
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir, UnsafePathError
from hpsearch.store.records import TrialRecords

__all__ = ["prune_checkpoints", "trials_to_prune"]


def trials_to_prune(trials: Mapping[str, Mapping[str, Any]], *, objective: Objective,
                    keep_best_trials: int) -> list[str]:
    """Ended trials outside the ``keep_best_trials`` best (by best objective value) whose
    checkpoints have not been deleted yet."""
    ended = [r for r in trials.values() if r.get("status") in st.ENDED]
    ranked = sorted(ended, key=lambda r: objective.score(r.get("best_value")))
    keep = {r["trial_id"] for r in ranked[:keep_best_trials]
            if math.isfinite(objective.score(r.get("best_value")))}
    return [r["trial_id"] for r in ranked
            if r["trial_id"] not in keep and not r.get("checkpoints_deleted")]


def prune_checkpoints(records: TrialRecords, sweep: SweepDir) -> list[Path]:
    """Delete the checkpoints :func:`trials_to_prune` names; mark those rows. Returns the
    directories deleted. A row whose trial id is not a trial id is left alone."""
    spec = records.spec
    deleted = []
    for trial_id in trials_to_prune(records.trials, objective=spec.objective,
                                    keep_best_trials=spec.checkpoints.keep_best_trials):
        try:
            dirs = sweep.checkpoint_dirs(trial_id)
        except UnsafePathError:
            continue
        for path in dirs:
            sweep.remove(path)
            deleted.append(path)
        row = records.trials[trial_id]
        row["checkpoints_deleted"] = True
        row["checkpoint"] = None
        records.version += 1
    return deleted
