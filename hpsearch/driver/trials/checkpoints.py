"""A trial's checkpoints, kept under its hpsearch id in the sweep directory."""

from __future__ import annotations

import os
import shutil

from hpsearch.store.layout import SweepDir

__all__ = ["CheckpointStore"]


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
