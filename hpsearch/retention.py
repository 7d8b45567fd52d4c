"""Bounded disk: which checkpoints a sweep keeps.

* A running trial keeps its newest ``checkpoints.keep`` checkpoints (Tune's and Ray
  Train's ``CheckpointConfig(num_to_keep=...)`` delete older ones as new ones arrive).
* A trial that has ended (completed, stopped by ASHA, diverged, failed) can never be
  promoted again: ASHA in hpsearch is asynchronous and stops for good. Its checkpoints are
  deleted at once unless it is among the sweep's ``checkpoints.keep_best_trials`` best
  ended trials; a trial pushed out of that top by a better one loses them then.

So at any moment a sweep holds at most ``(slots + keep_best_trials) * keep`` checkpoints.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Mapping

from hpsearch.space.spec import Spec
from hpsearch.tables import ENDED



def trials_to_prune(trials: Mapping[str, Mapping[str, Any]], *, mode: str,
                    keep_best_trials: int) -> list[str]:
    """Ended trials outside the ``keep_best_trials`` best (by best objective value) that
    still have checkpoints on disk."""
    ended = [r for r in trials.values() if r.get("status") in ENDED]
    sign = 1 if mode == "min" else -1

    def score(row: Mapping[str, Any]) -> float:
        value = row.get("best_value")
        if value is None or not math.isfinite(value):
            return math.inf
        return sign * value

    ranked = sorted(ended, key=score)
    keep = {r["trial_id"] for r in ranked[:keep_best_trials] if math.isfinite(score(r))}
    return [r["trial_id"] for r in ranked
            if r["trial_id"] not in keep and not r.get("checkpoints_deleted")]


def checkpoint_dirs(sweep_dir: str | Path, trial_id: str) -> list[Path]:
    """Checkpoint directories of one trial: in-process trials' and Ray Train's."""
    root = Path(sweep_dir)
    found = list(root.glob(f"checkpoints/{trial_id}/checkpoint_*"))
    found += list(root.glob(f"train/train-{trial_id}/checkpoint_*"))
    return [p for p in found if p.is_dir()]


def prune_checkpoints(records, sweep_dir: str | Path, spec: Spec) -> list[Path]:
    """Delete the checkpoints :func:`trials_to_prune` names; mark those rows. Returns the
    directories deleted."""
    deleted = []
    for trial_id in trials_to_prune(records.trials, mode=spec.objective.mode,
                                    keep_best_trials=spec.checkpoints.keep_best_trials):
        for path in checkpoint_dirs(sweep_dir, trial_id):
            shutil.rmtree(path, ignore_errors=True)
            deleted.append(path)
        row = records.trials[trial_id]
        row["checkpoints_deleted"] = True
        row["checkpoint"] = None
        records.version += 1
    return deleted
