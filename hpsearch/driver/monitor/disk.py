"""Notices that the sweep's disk is full, from whichever write meets it first.

A full disk (or a spent quota) is the sweep's problem, not a trial's. It shows up as:

* a trial's error: its checkpoint could not be written (the error file, which Tune keeps
  on the driver's local disk, names ``[Errno 28]`` or ``No space left on device``);
* a write of the driver's: the tables, the study journal (:meth:`DiskWatch.note`);
* the free space itself, looked at every few seconds while the sweep runs.

From the first of these on, :attr:`DiskWatch.full` holds: the stopper ends the run as a
Ctrl-C does (:mod:`hpsearch.driver.monitor.stops`), the trial whose write failed is
*paused* rather than failed (the sweep's record, which it watches, leaves it unfinished in
the study and its row running), and ``hpsearch resume`` continues every paused and
stopped trial from its last complete checkpoint. It attaches to the record as a
:class:`~hpsearch.driver.record.sweep_record.RecordWatcher` (:meth:`DiskWatch.pauses`,
:meth:`DiskWatch.write_failed`) and to Tune as a callback; nothing else knows of it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from ray.tune import Callback

from hpsearch.driver.search.ids import hpsearch_id
from hpsearch.errors import is_disk_full, says_disk_full
from hpsearch.store.layout import SweepDir, fmt_bytes, free_bytes

__all__ = ["DiskWatch"]

#: Below this, the disk counts as full before any write has failed.
NEARLY_FULL = 64_000


class DiskWatch(Callback):
    """The sweep's full-disk watch (module docstring).

    Args:
        sweep: The sweep's directory.
        say: Prints a line for people (the progress log), once, when the disk fills.
        every_s: How often the free space is looked at.
    """

    def __init__(self, sweep: SweepDir, *, say: Callable[[str], None] | None = None,
                 every_s: float = 2.0):
        self.sweep = sweep
        self.say = say
        self.every_s = every_s
        self.evidence: str | None = None
        self.paused: set[str] = set()  # hpsearch ids of trials a full disk stopped
        self._trials: dict[str, Any] = {}  # hpsearch id -> Tune trial
        self._looked = 0.0

    @property
    def full(self) -> bool:
        return self.evidence is not None

    def note(self, what: str, error: BaseException | str | None) -> bool:
        """``error`` (an exception or its text) met ``what`` (``writing the trial tables``):
        whether it is a full disk's, which from now on :attr:`full` says."""
        if not (is_disk_full(error) if isinstance(error, BaseException)
                else says_disk_full(error)):
            return False
        if self.evidence is None:
            self.evidence = what
            if self.say is not None:
                self.say(f"the disk holding {self.sweep.storage} is full ({what}): "
                         "stopping the trials at their last checkpoints; the sweep can be "
                         "resumed once space is freed")
        return True

    def pauses(self, trial_id: str) -> bool:
        """Whether the error of trial ``trial_id`` (an hpsearch id) is a full disk's; if
        so it is paused, not failed."""
        trial = self._trials.get(trial_id)
        if trial is None:
            return False
        if trial_id in self.paused:
            return True
        if not self.note(f"writing trial {trial_id}'s files", _error_text(trial)):
            return False
        self.paused.add(trial_id)
        return True

    def write_failed(self, what: str, error: BaseException) -> bool:
        """A write of the sweep's record failed: whether it is a full disk's."""
        return self.note(what, error)

    def look(self) -> None:
        """Count the disk as full when almost nothing is free (at most every ``every_s``)."""
        now = time.monotonic()
        if self.full or now - self._looked < self.every_s:
            return
        self._looked = now
        free = free_bytes(self.sweep.path)
        if free is not None and free < NEARLY_FULL:
            self.note(f"{fmt_bytes(free)} free", "No space left on device")

    # --- what Tune tells --------------------------------------------------------------------

    def on_trial_start(self, iteration, trials, trial, **info):
        self._trials[hpsearch_id(trial)] = trial

    def on_trial_recover(self, iteration, trials, trial, **info):
        self.pauses(hpsearch_id(trial))  # Tune retries it; the stopper stops it again

    def on_step_end(self, iteration, trials, **info):
        self.look()

    def __getstate__(self):
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {}


def _error_text(trial: Any) -> str | None:
    path = getattr(trial, "error_file", None)
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except (OSError, TypeError):
        return None
