"""How the training loop talks to whatever runs it.

The harness never imports Ray. It is handed a :class:`Session`:

* :class:`LocalSession` (here) runs in the current process: ``hpsearch trial`` with one
  worker, unit tests, benchmarks. Checkpoints go to a local folder.
* :mod:`hpsearch.driver.trials.sessions` provides the sessions under Ray: a Ray Tune
  session for one-worker trials that skip the worker group, a Ray Train session
  (``ray.train.report`` / ``ray.train.get_checkpoint``), and a warm worker group's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


class Session(Protocol):
    """What the training loop needs from its runner.

    ``report`` is called by *every* rank at the same points (collective in Ray Train);
    only rank 0 passes a ``checkpoint_dir``. The runner owns the directory afterwards.

    A session may also have ``device_index``: the ``cuda:N`` this worker trains on when it
    uses a GPU (``None`` or absent: its ``local_rank``; a ``str``: why the GPU its runner
    assigned is not visible, raised when the trial trains on a GPU), ``gpu_share`` (below
    1: the share of the GPU's memory this process may use) and ``first_collective_s``
    (how long the first all-reduce may take; absent: 60 s).
    """

    world_rank: int
    world_size: int
    local_rank: int

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None: ...

    def latest_checkpoint_dir(self) -> str | None:
        """A local directory holding the checkpoint to resume from, or ``None``."""
        ...


@dataclass
class LocalSession:
    """Single-process session: collects reports, keeps checkpoints under ``root``.

    Args:
        root: Where checkpoints are kept (``root/checkpoint_000003`` ...); ``None`` keeps none.
        on_report: Called with each metrics dict, e.g. to print or record it.
        resume_from: A checkpoint directory to resume from.
        keep: How many newest checkpoints to keep on disk.
    """

    root: str | None = None
    on_report: Callable[[dict[str, Any]], None] | None = None
    resume_from: str | None = None
    keep: int = 2
    world_rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    reports: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        """Record ``metrics``; take ownership of ``checkpoint_dir`` (moved under ``root``,
        or deleted when ``root`` is ``None``), then call ``on_report``."""
        from hpsearch.fence import remove_inside

        metrics = dict(metrics)
        if checkpoint_dir is not None and self.root is not None:
            dest = os.path.join(self.root, f"checkpoint_{len(self.reports):06d}")
            os.makedirs(self.root, exist_ok=True)
            remove_inside(self.root, dest)
            shutil.move(checkpoint_dir, dest)
            self.checkpoints.append(dest)
            while len(self.checkpoints) > self.keep:
                remove_inside(self.root, self.checkpoints.pop(0))
            metrics["checkpoint"] = dest
        elif checkpoint_dir is not None:
            from hpsearch.train.checkpoint import discard

            discard(checkpoint_dir)
        self.reports.append(metrics)
        if self.on_report is not None:
            self.on_report(metrics)

    def latest_checkpoint_dir(self) -> str | None:
        return self.resume_from

    @property
    def last_checkpoint(self) -> str | None:
        """The newest checkpoint kept under ``root``, e.g. to resume a later session from."""
        return self.checkpoints[-1] if self.checkpoints else None
