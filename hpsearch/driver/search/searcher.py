"""The sweep's searcher: Ray Tune's ``Searcher`` interface over the sweep record's ask and end.

:class:`SweepSearcher` is the one place a trial begins and ends in the record:

* ``suggest`` asks the :class:`~hpsearch.driver.limits.admission.Admission` whether a
  trial may start now; if so it continues an unfinished trial of the record (a resumed
  sweep's, under its own hpsearch id and Optuna trial) or asks the study for a new one.
  The hpsearch id travels in the trial's config (:mod:`~hpsearch.driver.search.ids`).
  Both are the record's verbs
  (:meth:`~hpsearch.driver.record.sweep_record.SweepRecord.ask`, ``carry_on``), and the
  record takes each of the trial's reports from then on, the study's step among them: a
  report is not the searcher's.
* ``on_trial_complete`` ends the trial in the record
  (:meth:`~hpsearch.driver.record.sweep_record.SweepRecord.end`): its row, the study's
  tell with the constraints' violations at its last report, the journal synced. Tune
  hands the last report to the tables callback before it ends a trial, so the record has
  it.

:class:`SweepSearch` is the search algorithm Tune runs it in. While the cluster ledger
holds the sweep below the trials it could run, it tells Tune the search is finished for
now, so that Tune does not keep an idle trial actor for reuse on resources another sweep
is waiting for; as soon as the share allows, it is open again.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from ray.tune.search import ConcurrencyLimiter, SearchGenerator, Searcher

from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.driver.search.ids import TRIAL_ID_KEY
from hpsearch.space.spec import Spec

__all__ = ["Admits", "SweepSearch", "SweepSearcher"]


class Admits(Protocol):
    """What the searcher asks before it starts a trial: the sweep's admission
    (:class:`~hpsearch.driver.limits.admission.Admission`, one room below the searcher's
    callers: the searcher is handed it)."""

    planned: int

    def decide(self, *, active: int, to_start: int) -> str:
        """``"start"``, ``"wait"`` or ``"done"``."""

    def held_back(self, *, active: int, to_start: int) -> bool:
        """Whether a shared cluster's ledger keeps the sweep below what it could run."""

    def cap(self, *, active: int, to_start: int) -> int:
        """Trials the sweep may run at once now (its heartbeat to the ledger)."""


class SweepSearcher(Searcher):
    """Optuna's ask/tell behind Tune's ``Searcher``, for one run of a sweep.

    Args:
        record: The sweep's record, its study open: trials are asked from its study,
            continued from its unfinished ones (a resume) and ended through it.
        admission: Decides whether a trial may start (``decide``, ``held_back``).
    """

    def __init__(self, record: SweepRecord, *, admission: Admits):
        spec = record.spec
        super().__init__(metric=spec.objective.metric, mode=spec.objective.mode)
        from hpsearch.driver.search.space import define_by_run

        self.spec: Spec = spec
        self.record = record
        self.admission = admission
        self.space: Callable[[Any], dict[str, Any]] = define_by_run(spec)
        self.unfinished = list(record.unfinished)
        self.created = len(record.recorded)  # the sweep's own trials the study holds
        self.live: dict[str, str] = {}  # Tune trial id -> the hpsearch trial it runs

    # --- what Tune asks -------------------------------------------------------------------

    def set_search_properties(self, metric, mode, config, **spec) -> bool:  # noqa: ANN001
        return True  # metric, mode and space come from the spec

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return True  # the admission caps concurrency itself (ConcurrencyLimiter defers)

    def to_start(self) -> int:
        """Trials this run may still start: unfinished ones to continue, new ones planned."""
        return len(self.unfinished) + max(0, self.admission.planned - self.created)

    def held_back(self) -> bool:
        """The ledger keeps this sweep below what it could run while trials of it run."""
        return bool(self.live) and self.admission.held_back(active=len(self.live),
                                                            to_start=self.to_start())

    def heartbeat(self) -> None:
        """Keep the sweep's claim on a shared cluster current (its client reports at most
        every few seconds): asked at every step of Tune's loop, through :class:`SweepSearch`."""
        self.admission.cap(active=len(self.live), to_start=self.to_start())

    def suggest(self, trial_id: str) -> dict | str | None:
        verdict = self.admission.decide(active=len(self.live), to_start=self.to_start())
        if verdict == "wait":
            return None
        if verdict == "done":
            return Searcher.FINISHED
        if self.unfinished:  # a resumed sweep's unfinished trial, continued
            recorded = self.unfinished.pop(0)
            key, params = recorded.trial_id, self.record.carry_on(recorded)
        else:
            key, params = trial_id, self.record.ask(trial_id, self.space)
            self.created += 1
        self.live[trial_id] = key
        return {**params, TRIAL_ID_KEY: key}

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        key = self.live.pop(trial_id, None)
        if key is not None:
            self.record.end(key, errored=error, returned=not error)

    # --- the record is the journal: Tune's saved state holds none of it --------------------

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        return None

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {"spec": self.spec}


class SweepSearch(SearchGenerator):
    """Tune's search generator over a :class:`SweepSearcher` (and the ``ConcurrencyLimiter``
    Tune reads its pending-trial count from), finished while the share holds it back."""

    def __init__(self, searcher: SweepSearcher, *, slots: int):
        super().__init__(ConcurrencyLimiter(searcher, max_concurrent=max(1, slots)))
        self.sweep_searcher = searcher

    def is_finished(self) -> bool:
        # Tune asks at least once per step of its loop: the ledger's heartbeat rides on it.
        self.sweep_searcher.heartbeat()
        return super().is_finished() or self.sweep_searcher.held_back()

    def save_to_dir(self, dirpath: str, session_str: str) -> None:
        return None
