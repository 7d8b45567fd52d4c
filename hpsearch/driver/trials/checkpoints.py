"""A trial's checkpoints, kept under its hpsearch id in the sweep directory."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Mapping

from hpsearch.store.layout import CHECKPOINT_REPORT, SweepDir

__all__ = ["CheckpointStore", "note_report"]


def note_report(checkpoint_dir: str, metrics: Mapping[str, Any]) -> None:
    """Write the report a checkpoint is taken at beside it (``report.json``), before the
    directory is handed on: a driver stopped between the checkpoint and the report (a
    Ctrl-C, a kill) loses the report, and the resume recovers it from here
    (:meth:`~hpsearch.store.layout.SweepDir.checkpointed_reports`)."""
    kept = {k: v for k, v in metrics.items() if k not in ("train_log", "checkpoint_path")
            and (v is None or isinstance(v, (bool, int, float, str)))}
    with open(os.path.join(checkpoint_dir, CHECKPOINT_REPORT), "w") as f:
        json.dump(kept, f)


class CheckpointStore:
    """A trial's checkpoints, newest ``keep`` of them, in ``sweep.trial_checkpoints(id)``.

    Harness trials keep their checkpoints here rather than handing them to Tune, keyed by
    the trial's hpsearch id: a trial that restarts (a worker died, the sweep was resumed
    under a new Tune trial) always continues from its newest complete checkpoint. A
    checkpoint appears under its final name only once it is whole.
    """

    def __init__(self, sweep: SweepDir, trial_id: str, keep: int):
        self.sweep = sweep
        self.root = sweep.trial_checkpoints(trial_id)
        self.keep = keep

    def add(self, src: str, step: int) -> str:
        """Take ``src`` (a directory the loop wrote) as the checkpoint of ``step``."""
        os.makedirs(self.root, exist_ok=True)
        dest = self.root / f"checkpoint_{step:09d}"
        tmp = self.root / f".tmp-{os.getpid()}-{step}"
        self.sweep.remove(tmp)
        try:
            shutil.move(src, tmp)
        except (OSError, shutil.Error):  # a full disk: keep no part of it, here or there
            self.sweep.remove(tmp)
            if os.path.isdir(src):
                from hpsearch.train.checkpoint import discard

                discard(src)
            raise
        self.sweep.remove(dest)
        os.replace(tmp, dest)
        for old in self.all()[: -self.keep]:
            self.sweep.remove(old)
        return os.fspath(dest)

    def all(self) -> list[str]:
        if not self.root.is_dir():
            return []
        names = sorted(n for n in os.listdir(self.root) if n.startswith("checkpoint_"))
        return [os.fspath(self.root / n) for n in names]

    def latest(self) -> str | None:
        found = self.all()
        return found[-1] if found else None
