"""What stops a trial early: hpsearch's ASHA on Tune's public scheduler interface.

:class:`SweepASHA` applies the rule of :class:`~hpsearch.driver.search.rungs.Rungs` (of
:class:`~hpsearch.driver.search.pareto.ParetoRungs`, MO-ASHA, with several objectives) to
each report, keyed by the trial's hpsearch id, so that a resumed sweep's trials, which
Tune knows under new ids, keep their place on the rungs. Its records are seeded from the
study when a sweep resumes (:func:`rung_values`): Tune never saves a scheduler, and Ray's
ASHA came back from a restore with empty rungs (ray-project/ray#30838). It tells the
sweep's record which trials it stops before ``max_t``, because Tune tells callbacks that a
trial completed but not why.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from hpsearch.driver.search.rules import RungRule, make_rungs
from hpsearch.driver.search.ids import hpsearch_id
from hpsearch.driver.record.study import RecordedTrial
from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.space.spec import Spec

__all__ = ["SweepASHA", "make_scheduler", "rung_values"]


def rung_values(recorded: Iterable[RecordedTrial], milestones: Iterable[float]
                ) -> dict[str, dict[float, float]]:
    """``{trial id: {milestone: value}}``: what each trial of the record reported at each
    rung. The study stores the first report at or past a milestone at the milestone
    itself (:func:`~hpsearch.driver.record.study.study_step`), the value ASHA judged."""
    milestones = tuple(milestones)
    out: dict[str, dict[float, float]] = {}
    for trial in recorded:
        at = {m: trial.intermediate[int(m)] for m in milestones
              if int(m) == m and int(m) in trial.intermediate}
        if at:
            out[trial.trial_id] = at
    return out


class SweepASHA(FIFOScheduler):
    """Asynchronous successive halving over :class:`Rungs` (:class:`Brackets` with
    ``scheduler.brackets`` > 1, each trial in its own bracket; PASHA's
    :class:`~hpsearch.driver.search.pasha.ProgressiveRungs` with ``scheduler.progressive``):
    a report at or past ``max_t`` ends the trial, one below it is judged at its rung (and
    under PASHA ends the trial at the current end, recorded as stopped early).

    Args:
        spec: The sweep's spec (``scheduler`` and ``objective``).
        record: The sweep's record, told of the trials stopped before ``max_t``.
        seeded: Rung values from before this run (:func:`rung_values`).
    """

    def __init__(self, spec: Spec, record: SweepRecord | None = None, *,
                 seeded: Mapping[str, Mapping[float, float]] | None = None):
        super().__init__()
        s = spec.scheduler
        self.rungs: RungRule = make_rungs(
            s, modes=[o.mode for o in spec.objectives], seed=spec.search.seed)
        self.rungs.seed_from(seeded or {})
        self.time_key = s.result_key
        self.metrics = [o.metric for o in spec.objectives]
        self.max_t = s.max_t
        self.record = record

    def _value(self, result: Mapping[str, Any]) -> Any:
        """What the rungs rank: the objective's value, or the tuple of all of them."""
        if len(self.metrics) == 1:
            return result[self.metrics[0]]
        return tuple(result[m] for m in self.metrics)

    def _judged(self, result: Mapping[str, Any]) -> bool:
        return self.time_key in result and all(m in result for m in self.metrics)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if not self._judged(result):
            return TrialScheduler.CONTINUE
        t = result[self.time_key]
        if t >= self.max_t:
            return TrialScheduler.STOP
        key = hpsearch_id(trial)
        if not self.rungs.judge(key, t, self._value(result)):
            return TrialScheduler.CONTINUE
        if self.record is not None:
            self.record.stopped_early(key)
        return TrialScheduler.STOP

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        # A last result past a rung the trial was not judged at is recorded, as Ray's
        # ASHA records it (it decides nothing for this trial any more).
        if result and self._judged(result) and result[self.time_key] < self.max_t:
            self.rungs.judge(hpsearch_id(trial), result[self.time_key], self._value(result))

    def debug_string(self) -> str:
        return f"hpsearch {self.rungs.describe()}"

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles the Tuner's config once into tuner.pkl, which hpsearch never reads.
        return {"time_key": self.time_key}


def make_scheduler(spec: Spec, record: SweepRecord | None = None) -> FIFOScheduler:
    """ASHA or FIFO, as ``spec.scheduler`` asks, its rungs seeded from the record's
    trials (a resume). ASHA compares trials on ``spec.scheduler.time_attr`` (``epoch`` or
    ``step``, which trainables report, or ``time``: Tune's ``time_total_s``, the trial's
    own seconds). PASHA (``progressive``) is seeded with every report, not only the
    rungs': its noise is measured on the trials' curves."""
    s = spec.scheduler
    if s.type == "fifo":
        return FIFOScheduler()
    every = s.progressive and record is not None
    milestones = sorted({t for trial in record.recorded for t in trial.intermediate}) \
        if every else s.rungs()
    seeded = rung_values(record.recorded, milestones) if record else None
    return SweepASHA(spec, record, seeded=seeded)
