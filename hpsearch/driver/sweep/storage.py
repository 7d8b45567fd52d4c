"""How much disk a sweep needs, checked before it starts, and the line a full disk ends it with.

The worst case a sweep holds on its storage at once is its checkpoints, ``keep`` per trial
(one more while a new one replaces the oldest) for every trial that runs and for the
``checkpoints.keep_best_trials`` best ended ones (:mod:`hpsearch.store.retention`), plus
its bookkeeping: the tables, the study journal and Tune's per-trial files, about 2 KB per
report and 40 KB per trial. One checkpoint's size is measured from the sweep's own
checkpoints when it has some, else estimated from the largest model the space can build
(harness workloads; a raw loop's or a command's checkpoints are unknown until written).

Before a run (and a resume) :func:`check_free_space` refuses to start when the disk cannot
take one checkpoint per running trial, and says so in one line when it may not take the
worst case; ``--dry-run`` prints :meth:`StorageNeed.line`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hpsearch.errors import DiskFullError
from hpsearch.space.spec import Spec
from hpsearch.store.layout import SweepDir, fmt_bytes, free_bytes, used_bytes

__all__ = ["StorageNeed", "check_free_space", "disk_full_error", "storage_need"]

PER_REPORT = 2_000
PER_TRIAL = 40_000
#: Kept free beyond the checkpoints for the tables, the journal and the manifest to start.
MARGIN = 1_000_000


@dataclass(frozen=True)
class StorageNeed:
    """What a sweep may hold on its storage at once.

    Attributes:
        checkpoint: One checkpoint's bytes (``None``: unknown).
        measured: Whether that came from the sweep's own checkpoints.
        slots: Trials at once.
        running: Checkpoints held for the trials that run (``slots * (keep + 1)``).
        kept: Checkpoints held for the best ended trials.
        bookkeeping: Tables, journal and Tune's files for every planned trial.
    """

    checkpoint: int | None
    measured: bool
    slots: int
    running: int
    kept: int
    bookkeeping: int

    @property
    def total(self) -> int:
        """The worst case in bytes (checkpoints of unknown size counted as none)."""
        return (self.checkpoint or 0) * (self.running + self.kept) + self.bookkeeping

    @property
    def to_start(self) -> int:
        """Bytes below which the sweep cannot start: one checkpoint per running trial and
        a margin for the tables (or the whole worst case, when that is smaller)."""
        return min(self.total, (self.checkpoint or 0) * self.slots + MARGIN)

    def line(self, free: int | None) -> str:
        """``storage   up to 31.0 MB: ...; 12.3 GB free``, for the plan."""
        if self.checkpoint is None:
            what = "checkpoints of unknown size (the trainable writes its own)"
        else:
            what = (f"{self.running + self.kept} checkpoints of "
                    f"{'' if self.measured else '~'}{fmt_bytes(self.checkpoint)}")
        tail = f"{fmt_bytes(free)} free" if free is not None else "free space unknown"
        if free is not None and free < self.total:
            tail += ": the sweep pauses when the disk fills (`hpsearch resume` continues it)"
        return (f"storage      up to {fmt_bytes(self.total)} ({what}, "
                f"{fmt_bytes(self.bookkeeping)} of tables and logs); {tail}")


def storage_need(spec: Spec, slots: int, *, sweep: SweepDir | None = None,
                 checkpoint: int | None = None) -> StorageNeed:
    """The worst case for ``spec`` at ``slots`` trials at once; ``checkpoint`` is the
    estimate for a new sweep (:func:`~hpsearch.driver.trials.resolve.checkpoint_estimate`),
    replaced by the largest checkpoint ``sweep`` already holds."""
    measured = _largest_checkpoint(sweep) if sweep is not None else None
    keep = spec.checkpoints.keep
    s = spec.scheduler
    reports = s.max_t if s.time_attr == "epoch" else 100
    return StorageNeed(
        checkpoint=measured or checkpoint, measured=measured is not None, slots=slots,
        running=slots * (keep + 1),
        kept=min(spec.checkpoints.keep_best_trials, spec.trials.num) * keep,
        bookkeeping=spec.trials.num * (PER_TRIAL + reports * PER_REPORT))


def _largest_checkpoint(sweep: SweepDir) -> int | None:
    """The largest ``checkpoint_*`` folder anywhere in the sweep (hpsearch's own store,
    Ray Train's runs, Tune's trial folders of raw loops)."""
    sizes = []
    for directory, subdirs, _ in os.walk(sweep.path):
        for name in [d for d in subdirs if d.startswith("checkpoint_")]:
            sizes.append(used_bytes(os.path.join(directory, name)))
        subdirs[:] = [d for d in subdirs if not d.startswith("checkpoint_")]
    return max(sizes) if sizes else None


def check_free_space(need: StorageNeed, where: SweepDir, *, resume: bool) -> str | None:
    """Refuse a sweep the disk cannot start; otherwise the plan's storage line.

    Raises:
        DiskFullError: Less is free than one checkpoint per running trial and a margin
            for the tables; nothing was written.
    """
    free = free_bytes(where.path)
    if free is not None and free < need.to_start:
        then = (f"`hpsearch resume {where.name} --storage {where.storage}`" if resume
                else "this command again")
        raise DiskFullError(
            f"the disk holding {where.storage} has {fmt_bytes(free)} free; the sweep needs "
            f"{fmt_bytes(need.to_start)} to start and up to {fmt_bytes(need.total)} in all. "
            f"Nothing was written: free space there (or choose another --storage), then "
            f"run {then}.")
    return need.line(free)


def disk_full_error(sweep: SweepDir, need: StorageNeed) -> DiskFullError:
    """The one line a sweep the disk stopped ends with: which disk, how much is free, how
    much more the sweep needs for its plan, and how to continue."""
    free = free_bytes(sweep.path)
    more = max(0, need.total - used_bytes(sweep.path))
    needs = f" It needs up to {fmt_bytes(more)} more to finish its plan." if more else ""
    return DiskFullError(
        f"the disk holding {sweep} is full ({fmt_bytes(free)} free): the sweep stopped and "
        f"its running trials are paused at their last checkpoint.{needs} Free space there, "
        f"then `hpsearch resume {sweep.name} --storage {sweep.storage}`.")
