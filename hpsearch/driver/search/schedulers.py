"""What stops a trial early: hpsearch's ASHA on Tune's public scheduler interface.

:class:`SweepASHA` applies the rule of :class:`~hpsearch.driver.search.rungs.Rungs` to
each report, keyed by the trial's hpsearch id, so that a resumed sweep's trials, which
Tune knows under new ids, keep their place on the rungs. Its records are seeded from the
study when a sweep resumes (:func:`rung_values`): Tune never saves a scheduler, and Ray's
ASHA came back from a restore with empty rungs (ray-project/ray#30838). It marks the
trials it stops before ``max_t`` in the records, because Tune tells callbacks that a trial
completed but not why.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from hpsearch.driver.search.rungs import Rungs
from hpsearch.driver.search.ids import hpsearch_id
from hpsearch.driver.search.study import RecordedTrial
from hpsearch.space.spec import Spec
from hpsearch.store.records import TrialRecords

__all__ = ["SweepASHA", "make_scheduler", "rung_values"]


def rung_values(recorded: Iterable[RecordedTrial], milestones: Iterable[float]
                ) -> dict[str, dict[float, float]]:
    """``{trial id: {milestone: value}}``: what each trial of the record reported at each
    rung. The study stores the first report at or past a milestone at the milestone
    itself (:func:`~hpsearch.driver.search.study.study_step`), the value ASHA judged."""
    milestones = tuple(milestones)
    out: dict[str, dict[float, float]] = {}
    for trial in recorded:
        at = {m: trial.intermediate[int(m)] for m in milestones
              if int(m) == m and int(m) in trial.intermediate}
        if at:
            out[trial.trial_id] = at
    return out


class SweepASHA(FIFOScheduler):
    """Asynchronous successive halving over :class:`Rungs`: a report at or past ``max_t``
    ends the trial, one below it is judged at its rung.

    Args:
        spec: The sweep's spec (``scheduler`` and ``objective``).
        records: The sweep's records: trials stopped before ``max_t`` are marked there.
        seeded: Rung values from before this run (:func:`rung_values`).
    """

    def __init__(self, spec: Spec, records: TrialRecords | None = None, *,
                 seeded: Mapping[str, Mapping[float, float]] | None = None):
        super().__init__()
        self.rungs = Rungs.of(spec.scheduler, spec.objective)
        self.rungs.seed_from(seeded or {})
        self.time_key = spec.scheduler.result_key
        self.objective_metric = spec.objective.metric
        self.max_t = spec.scheduler.max_t
        self.records = records

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if self.time_key not in result or self.objective_metric not in result:
            return TrialScheduler.CONTINUE
        t = result[self.time_key]
        if t >= self.max_t:
            return TrialScheduler.STOP
        key = hpsearch_id(trial)
        if not self.rungs.judge(key, t, result[self.objective_metric]):
            return TrialScheduler.CONTINUE
        if self.records is not None:
            self.records.stopped_by_scheduler(key)
        return TrialScheduler.STOP

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        # A last result past a rung the trial was not judged at is recorded, as Ray's
        # ASHA records it (it decides nothing for this trial any more).
        if result and self.time_key in result and self.objective_metric in result:
            if result[self.time_key] < self.max_t:
                self.rungs.judge(hpsearch_id(trial), result[self.time_key], result[self.objective_metric])

    def debug_string(self) -> str:
        cut = ", ".join(f"{m:g}: {self.rungs.cutoff(m)}" for m in self.rungs.milestones)
        return f"hpsearch ASHA (cutoffs {cut})"

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {"time_key": self.time_key}


def make_scheduler(spec: Spec, records: TrialRecords | None = None, *,
                   seeded: Mapping[str, Mapping[float, float]] | None = None) -> FIFOScheduler:
    """ASHA or FIFO, as ``spec.scheduler`` asks. ASHA compares trials on
    ``spec.scheduler.time_attr`` (``epoch`` or ``step``, which trainables report, or
    ``time``: Tune's ``time_total_s``, the trial's own seconds)."""
    if spec.scheduler.type == "fifo":
        return FIFOScheduler()
    return SweepASHA(spec, records, seeded=seeded)
