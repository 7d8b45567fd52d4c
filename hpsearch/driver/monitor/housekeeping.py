"""What a running sweep gives back: leaked placement groups, and warm groups beyond its
share of a shared cluster."""

from __future__ import annotations

import time
from typing import Protocol

from ray.tune import Callback

from hpsearch.driver.search.ids import hpsearch_id

__all__ = ["Housekeeping", "Shares", "WorkerGroups"]


class WorkerGroups(Protocol):
    """What housekeeping asks of the sweep's runner
    (:class:`~hpsearch.driver.trials.runners.Runner`)."""

    uses_worker_groups: bool

    def trial_ended(self, trial_id: str) -> None:
        """The trial's warm worker group, if any, is free."""

    def set_slots(self, slots: int) -> None:
        """Hold no more warm worker groups than ``slots``."""


class Shares(Protocol):
    """What housekeeping asks of the sweep's admission
    (:class:`~hpsearch.driver.limits.admission.Admission`)."""

    def share(self) -> int:
        """The trials the sweep may run at once on a shared cluster."""

#: How often a sweep whose trials run no worker groups looks for orphaned groups.
OTHERS_REAP_S = 10.0


class Housekeeping(Callback):
    """Keeps a sweep from holding what it does not use.

    * A dead Ray Train controller can leave its placement group holding CPUs and GPUs
      (:func:`~hpsearch.driver.internals.reap_orphan_placement_groups`), this sweep's or
      an ended one's on the same cluster: for a runner whose trials run worker groups,
      orphans are removed once a second, for the others every 10 s (an ended sweep's
      can hold the CPUs their trials wait for), and for every runner when a trial fails
      and when the sweep ends.
    * A trial Tune ended frees its warm worker group at once (its Tune trial may have been
      killed before it could say so), and the runner holds no more groups than the
      sweep's share of the cluster (``admission.share()``).

    Args:
        runner: The sweep's runner (``uses_worker_groups``, ``trial_ended``, ``set_slots``).
        admission: The sweep's admission (``share()``).
        every_s: Seconds between periodic checks.
    """

    def __init__(self, runner: WorkerGroups, admission: Shares, *, every_s: float = 1.0):
        self.runner = runner
        self.admission = admission
        self.every_s = every_s
        self.last = 0.0
        self.last_reap = -OTHERS_REAP_S  # the first step looks
        self.slots: int | None = None
        self.removed: list[str] = []

    def reap(self) -> None:
        from hpsearch.driver.internals import reap_orphan_placement_groups

        try:
            self.removed += reap_orphan_placement_groups()
        except Exception:  # noqa: BLE001 - housekeeping must never end a sweep
            pass

    def on_step_end(self, iteration, trials, **info):
        if time.monotonic() - self.last < self.every_s:
            return
        self.last = time.monotonic()
        if self.runner.uses_worker_groups or self.last - self.last_reap >= OTHERS_REAP_S:
            self.last_reap = self.last
            self.reap()
        slots = self.admission.share()
        if slots != self.slots:
            self.slots = slots
            try:
                self.runner.set_slots(slots)
            except Exception:  # noqa: BLE001 - housekeeping must never end a sweep
                pass

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.runner.trial_ended(hpsearch_id(trial))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.runner.trial_ended(hpsearch_id(trial))
        self.reap()

    def on_experiment_end(self, trials, **info):
        self.reap()

    def __getstate__(self):
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {}
