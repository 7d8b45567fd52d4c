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

import bisect
import math
from pathlib import Path
from typing import Any, Mapping

from hpsearch.space.spec import Objective
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir, UnsafePathError
from hpsearch.store.records import TrialRecords

__all__ = ["CheckpointPruner", "prune_checkpoints", "trials_to_prune"]


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
    return _delete(records, sweep, trials_to_prune(
        records.trials, objective=spec.objective,
        keep_best_trials=spec.checkpoints.keep_best_trials))


class CheckpointPruner:
    """:func:`prune_checkpoints` at the cost of what changed: it ranks only the trials
    that ended since its last call against the ``keep_best_trials`` best so far (an ended
    row's best value is final), instead of sorting every trial each time one ends.

    Attributes:
        rows_ranked: Rows it looked at so far (tests count work with it).
    """

    def __init__(self) -> None:
        self.version: int | None = None
        self.rewrites: int | None = None
        self.best: list[tuple[float, int, str]] = []  # (score, position, trial_id), best first
        self.seen: set[str] = set()  # ended trials already ranked
        self.rows_ranked = 0

    def prune(self, records: TrialRecords, sweep: SweepDir) -> list[Path]:
        """Delete the checkpoints of ended trials outside the best; returns them."""
        spec = records.spec
        if self.version is None or records.rewrites != self.rewrites:
            return self._prune_all(records, sweep)
        version = records.version
        keep = spec.checkpoints.keep_best_trials
        out: list[str] = []
        for trial_id in records.changed_since(self.version):
            row = records.trials[trial_id]
            self.rows_ranked += 1
            if row.get("status") not in st.ENDED or trial_id in self.seen:
                continue
            self.seen.add(trial_id)
            score = spec.objective.score(row.get("best_value"))
            if not math.isfinite(score) or keep <= 0:
                out.append(trial_id)
                continue
            bisect.insort(self.best, (score, records.position(trial_id), trial_id))
            if len(self.best) > keep:
                out.append(self.best.pop()[2])  # pushed out of the best
        self.version = version
        return _delete(records, sweep, [t for t in out
                                        if not records.trials[t].get("checkpoints_deleted")])

    def _prune_all(self, records: TrialRecords, sweep: SweepDir) -> list[Path]:
        spec = records.spec
        version = records.version
        objective, keep = spec.objective, spec.checkpoints.keep_best_trials
        ended = [r for r in records.trials.values() if r.get("status") in st.ENDED]
        self.rows_ranked += len(records.trials)
        self.seen = {r["trial_id"] for r in ended}
        ranked = sorted((objective.score(r.get("best_value")), records.position(r["trial_id"]),
                         r["trial_id"]) for r in ended)
        self.best = [r for r in ranked if math.isfinite(r[0])][:max(keep, 0)]
        deleted = prune_checkpoints(records, sweep)
        self.version, self.rewrites = version, records.rewrites
        return deleted


def _delete(records: TrialRecords, sweep: SweepDir, trial_ids: list[str]) -> list[Path]:
    deleted = []
    for trial_id in trial_ids:
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
        records.touch(trial_id)
    return deleted
