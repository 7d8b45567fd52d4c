"""Trial records: plain per-trial state keyed by trial id, fed by Tune's results.

:class:`TrialRecords` is what the trial tables are written from. It imports neither Ray
nor pandas, so its logic is tested with hand-made results. An ended row is final: nothing
that arrives for it later (a trial Tune restarts after a crash, a late result) changes it,
so a finished trial's result is never lost or overwritten.
"""

from __future__ import annotations

import math
import time
from typing import Any, Iterable, Mapping, TypedDict

from hpsearch.space.spec import Spec
from hpsearch.store import status as st
from hpsearch.store.reports import (FIRST_STEP_AT, OBJECTIVE_MISSING, epoch_seconds,
                                    final_status, front_for, history_row, is_nan, is_nat,
                                    log_rows, report_key)

__all__ = ["TrialRecords", "TrialRow"]


class TrialRow(TypedDict, total=False):
    """One trial's row: the ``trials.parquet`` columns (``docs/trial-tables.md``) and what
    the record keeps beside them. Each searched parameter, and with several objectives
    each objective's metric, is a key of its own besides these."""

    trial_id: str
    status: str  # a trial status (hpsearch.store.status)
    final_value: float | None  # the objective at its last report
    best_value: float | None
    best_step: int | None
    best_epoch: float | None
    steps: int | None
    epochs: float | None
    wall_s: float | None
    precision_used: str | None
    checkpoint: str | None
    error: str | None
    started_at: float  # epoch seconds (a Timestamp once read back from the table)
    ended_at: float
    startup_s: float
    optuna_trial: int
    feasible: bool  # with constraints
    pareto: bool  # with several objectives
    # kept in memory only
    last: dict[str, Any]  # its last report, as a history row
    objective_reported: bool
    stopped_early: bool  # ASHA stopped it at a rung
    checkpoints_deleted: bool  # by retention

class TrialRecords:
    """Plain per-trial state and history rows, independent of Ray (tested directly).

    Writers learn what changed without looking at every row: each change to a row marks
    it (:meth:`touch`, :meth:`changed_since`), ``history`` only grows, and anything else
    (rows removed, a resume's :meth:`load`) bumps :attr:`rewrites`. Change rows through
    these methods, or call :meth:`touch` after changing one in place.

    Attributes:
        trials: ``trial_id -> row`` (:class:`TrialRow`: the future ``trials.parquet``
            row, plus what the record keeps beside it).
        history: Every report, in arrival order (the future ``history.parquet``).
        version: Bumped on every change, so writers know what is unsaved.
        rewrites: Bumped when rows were removed or replaced: writers write everything.
    """

    def __init__(self, spec: Spec):
        self.spec = spec
        self.trials: dict[str, TrialRow] = {}
        self.history: list[dict[str, Any]] = []
        self.version = 0
        self.rewrites = 0
        self._seen_steps: set[tuple[str, Any]] = set()
        self._optuna: dict[str, int] = {}  # trial_id -> Optuna trial number, before its row
        self._touched: dict[str, int] = {}  # trial_id -> version of its last change, oldest first
        self._position: dict[str, int] = {}  # trial_id -> order of its row in the table
        self._counted: tuple[int, int] | None = None  # (version, rewrites) of counts()
        self._counts: dict[str, int] = {}
        self._status_of: dict[str, str] = {}  # trial_id -> status as last counted
        self.rows_counted = 0  # rows counts() looked at (tests count work with it)
        self.front = front_for(spec)  # each objective's value and ``pareto``, with several

    def touch(self, trial_id: str) -> None:
        """Note that ``trial_id``'s row changed (a new version)."""
        self.version += 1
        self._touched.pop(trial_id, None)  # re-inserted last: the dict stays oldest first
        self._touched[trial_id] = self.version
        if trial_id not in self._position:
            self._position[trial_id] = len(self._position)

    def changed_since(self, version: int | None) -> list[str]:
        """The trials whose rows changed after ``version`` (all with ``None``), in table
        order. Costs the number of rows changed, not the number of rows."""
        changed = []
        for trial_id, at in reversed(self._touched.items()):
            if version is not None and at <= version:
                break
            if trial_id in self.trials:
                changed.append(trial_id)
        changed.sort(key=self.position)
        return changed

    def position(self, trial_id: str) -> int:
        """Where ``trial_id``'s row goes in the trial table: the order trials started."""
        found = self._position.get(trial_id)
        if found is None:
            found = self._position[trial_id] = len(self._position)
        return found

    def _ended(self, trial_id: str) -> bool:
        row = self.trials.get(trial_id)
        return row is not None and row.get("status") in st.ENDED

    def start(self, trial_id: str, params: Mapping[str, Any]) -> None:
        if self._ended(trial_id):
            # Ended before a crash that Tune's saved state did not see: Tune starts it
            # again, the trial replays its recorded result, and its row stays as it was.
            return
        row = self.trials.setdefault(trial_id, {"trial_id": trial_id, "status": st.RUNNING})
        self.touch(trial_id)
        row.update({p.name: params.get(p.name) for p in self.spec.params})
        row["status"] = st.RUNNING
        row.setdefault("started_at", time.time())
        if trial_id in self._optuna:
            row["optuna_trial"] = self._optuna[trial_id]

    def result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        if self._ended(trial_id):
            return
        row = self.trials.setdefault(trial_id, {"trial_id": trial_id, "status": st.RUNNING})
        for logged in log_rows(trial_id, result):
            self._append(logged)
        self.touch(trial_id)
        hist = history_row(trial_id, result)
        self._append(hist)
        objective = self.spec.objective
        value = result.get(objective.metric)
        if not result.get(OBJECTIVE_MISSING):
            row["objective_reported"] = True
        row["last"] = hist
        row["final_value"] = value
        if objective.better(value, row.get("best_value")):
            row["best_value"] = value
            row["best_step"] = hist.get("step")
            row["best_epoch"] = hist.get("epoch")
        row["steps"] = hist.get("step")
        row["epochs"] = hist.get("epoch")
        self._objectives_and_constraints(row, result)
        row["wall_s"] = result.get("time_total_s")
        if result.get("precision") is not None:
            row["precision_used"] = result.get("precision")
        if result.get("checkpoint_path"):
            row["checkpoint"] = result["checkpoint_path"]
        first_step = result.get(FIRST_STEP_AT)
        started = epoch_seconds(row.get("started_at"))
        if "startup_s" not in row and first_step is not None and started:
            # The first attempt's start-up: a restart after a failure keeps it.
            row["startup_s"] = max(0.0, float(first_step) - started)

    def _objectives_and_constraints(self, row: dict[str, Any], result: Mapping[str, Any]) -> None:
        """Each objective's value (several objectives) and ``feasible`` (constraints), at
        the last report."""
        row.update(self.front.values(result))
        if self.spec.constraints:
            row["feasible"] = all(c.violation(result.get(c.metric)) <= 0
                                  for c in self.spec.constraints)

    def _settle_front(self, trial_id: str) -> None:
        """Update ``pareto`` after ``trial_id`` ended (several objectives:
        :class:`~hpsearch.store.reports.ParetoFront`)."""
        for tid, on in self.front.settle(self.trials, trial_id).items():
            self._mark_pareto(tid, on)

    def _mark_pareto(self, trial_id: str, on: bool) -> None:
        if self.trials[trial_id].get("pareto") is not on:
            self.trials[trial_id]["pareto"] = on
            self.touch(trial_id)

    def _append(self, hist: dict[str, Any]) -> None:
        key = report_key(hist)
        if key not in self._seen_steps:  # a restarted trial may repeat a report
            self._seen_steps.add(key)
            self.history.append(hist)

    def end(
        self,
        trial_id: str,
        *,
        errored: bool = False,
        error: str | None = None,
        checkpoint: str | None = None,
        budget_expired: bool = False,
        returned: bool = False,
    ) -> str:
        """End a trial's row; returns its status (an ended row keeps the one it has).

        Args:
            errored: Its code raised.
            error: The error's last line.
            checkpoint: Its last checkpoint.
            budget_expired: The sweep ended around it.
            returned: Its training function returned by itself (Tune's trial completed):
                if it never reported the objective metric, it failed.
        """
        if self._ended(trial_id):
            return self.trials[trial_id]["status"]
        row = self.trials.setdefault(trial_id, {"trial_id": trial_id})
        self.touch(trial_id)
        if returned and not errored and not row.get("objective_reported"):
            errored, error = True, self._never_reported(row)
        row["status"] = final_status(
            row.get("last"), spec=self.spec, errored=errored, budget_expired=budget_expired,
            stopped_early=bool(row.get("stopped_early")) if returned else None,
        )
        row["ended_at"] = time.time()
        self.annotate(trial_id, error=error, checkpoint=checkpoint)
        self._settle_front(trial_id)
        return row["status"]

    def annotate(self, trial_id: str, *, error: str | None = None,
                 checkpoint: str | None = None) -> None:
        """Add what was learnt after a row's end: its error's last line, its checkpoint
        (each only if the row has none yet)."""
        row = self.trials.get(trial_id)
        if row is None:
            return
        for key, value in (("error", error), ("checkpoint", checkpoint)):
            if value and not row.get(key):
                row[key] = value
                self.touch(trial_id)

    def end_as_recorded(self, trial_id: str, *, params: Mapping[str, Any], status: str,
                        optuna_trial: int, values: Mapping[int, float],
                        final_value: float | None = None) -> None:
        """End a row as the study recorded the trial's end: a driver killed after the
        study knew it and before the tables were written. ``values`` are the study's
        intermediate values (``{study step: value}``); the row's best and final values
        come from them (a ``completed`` trial's final value is the study's value).

        The reports the tables never saw are recovered from the study: a history row for
        each study step past the trial's last one there, with the objective metric and the
        scheduler's time attribute only (``from_study`` true), and the row's ``epochs`` or
        ``steps`` advanced to the last of them."""
        row = self.trials.get(trial_id)
        if row is None:
            row = self.trials[trial_id] = {"trial_id": trial_id}
            row.update({p.name: params.get(p.name) for p in self.spec.params})
        self.touch(trial_id)
        steps = sorted(values)
        if steps and isinstance(values[steps[-1]], tuple):  # a study of several objectives
            row.update({o.metric: v for o, v in zip(self.spec.objectives, values[steps[-1]])})
            values = {k: v[0] for k, v in values.items()}
            final_value = final_value[0] if isinstance(final_value, tuple) else final_value
        if final_value is None and steps:
            final_value = values[steps[-1]]
        best = self.spec.objective.best(values.values())
        self._recover_reports(trial_id, row, values)
        row.update(status=status, optuna_trial=optuna_trial, ended_at=time.time())
        if final_value is not None:
            row["final_value"] = final_value
            row["objective_reported"] = True
        if self.spec.objective.better(best, row.get("best_value")):
            row["best_value"] = best
        self._settle_front(trial_id)

    def _recover_reports(self, trial_id: str, row: dict[str, Any],
                         values: Mapping[int, float]) -> None:
        """History rows for the study's reports past the trial's last one in the history
        (see :meth:`end_as_recorded`)."""
        key = self.spec.scheduler.result_key
        seen = [h.get(key) for h in self.history
                if h["trial_id"] == trial_id and h.get("evaluated") is not False]
        seen = [float(t) for t in seen if isinstance(t, (int, float)) and math.isfinite(t)]
        # A study step is the floor of its report's time: a report at 7.4 s is step 7.
        last = math.floor(max(seen) + 1e-9) if seen else -math.inf
        lost = [k for k in sorted(values) if k > last]
        metric = self.spec.objective.metric
        for k in lost:
            self._append({"trial_id": trial_id, key: k, metric: values[k], "evaluated": True,
                          "from_study": True})
        column = {"epoch": "epochs", "step": "steps"}.get(key)
        if lost and column:
            row[column] = lost[-1]

    def recover_reports(self, trial_id: str, *, params: Mapping[str, Any],
                        values: Mapping[int, float]) -> None:
        """The reports of a trial the study still runs that the tables never saw (the
        driver died, or the disk filled, before they were written): history rows from the
        study, as :meth:`end_as_recorded` adds them; the row stays unfinished."""
        row = self.trials.get(trial_id)
        if row is None:
            row = self.trials[trial_id] = {"trial_id": trial_id}
            row.update({p.name: params.get(p.name) for p in self.spec.params})
        self.touch(trial_id)
        self._recover_reports(trial_id, row, values)
        best = self.spec.objective.best(values.values()) if values else None
        if best is not None and self.spec.objective.better(best, row.get("best_value")):
            row["best_value"] = best

    def link_optuna(self, trial_id: str, number: int) -> None:
        """The Optuna trial (its number in the study) that proposed this trial."""
        self._optuna[trial_id] = number
        row = self.trials.get(trial_id)
        current = row.get("optuna_trial") if row is not None else None
        if row is not None and not (isinstance(current, int) and current == number):
            row["optuna_trial"] = number
            self.touch(trial_id)

    def add_without_reports(self, trial_id: str, params: Mapping[str, Any], *,
                            optuna_trial: int | None = None) -> None:
        """A ``stopped`` row for a trial the Optuna study holds and the table never saw:
        proposed but never started (the sweep ended first), or started under a driver that
        was killed before the table was written (its reports are in the study only).

        A row the table has but never ended is ended as ``stopped`` here."""
        row = self.trials.get(trial_id)
        if row is not None:
            if row.get("status", st.RUNNING) in st.UNFINISHED:
                row.update(status=st.STOPPED, ended_at=time.time())
                self.touch(trial_id)
            if optuna_trial is not None:
                self.link_optuna(trial_id, optuna_trial)
            return
        row: dict[str, Any] = {"trial_id": trial_id, "status": st.STOPPED,
                               "ended_at": time.time()}
        row.update({p.name: params.get(p.name) for p in self.spec.params})
        if optuna_trial is not None:
            row["optuna_trial"] = optuna_trial
        self.trials[trial_id] = row
        self.touch(trial_id)

    def stopped_by_scheduler(self, trial_id: str) -> None:
        """ASHA stopped this trial at a rung (before ``max_t``)."""
        row = self.trials.get(trial_id)
        if row is not None and not self._ended(trial_id):
            row["stopped_early"] = True
            self.touch(trial_id)

    def _never_reported(self, row: Mapping[str, Any]) -> str:
        metric = self.spec.objective.metric
        keys = {"trial_id", "step", "epoch", "time_total_s", "training_iteration", "evaluated",
                metric}
        names = ", ".join(sorted(k for k in row.get("last") or {} if k not in keys)) or "none"
        return (f"TrainableError: {self.spec.trainable} never reported the objective metric "
                f"{metric!r}; it reported: {names}. Report it with "
                f"ray.train.report({{{metric!r}: ...}}) or change objective.metric.")

    def load(self, trials: Iterable[Mapping[str, Any]], history: Iterable[Mapping[str, Any]]):
        """Seed from tables written earlier (resume)."""
        self.version += 1
        self.rewrites += 1
        self.front.reset()
        for row in trials:
            row = {k: v for k, v in row.items() if not is_nan(v) and not is_nat(v)}
            if math.isfinite(self.spec.objective.score(row.get("best_value"))):
                row["objective_reported"] = True
            self.trials[row["trial_id"]] = row
            self.position(row["trial_id"])
        last: dict[str, dict[str, Any]] = {}
        for row in history:
            row = {k: v for k, v in row.items() if not is_nan(v)}
            key = report_key(row)
            if key not in self._seen_steps:
                self._seen_steps.add(key)
                self.history.append(row)
                if row.get("evaluated") is not False:  # a report, not a log_every row
                    last[row["trial_id"]] = row
        for tid, row in self.trials.items():
            if tid in last:
                row["last"] = last[tid]

    # --- questions -----------------------------------------------------------------------

    def last_reported(self, trial_id: str, key: str) -> float:
        """The latest ``key`` (a time attribute) of the trial's evaluated reports in the
        history, or minus infinity."""
        seen = [h.get(key) for h in self.history
                if h["trial_id"] == trial_id and h.get("evaluated") is not False]
        return max((float(t) for t in seen if isinstance(t, (int, float)) and math.isfinite(t)),
                   default=-math.inf)

    def unfinished(self) -> list[str]:
        return [tid for tid, row in self.trials.items()
                if row.get("status", st.RUNNING) in st.UNFINISHED]

    def counts(self) -> dict[str, int]:
        """Trials per status. Kept up to date from the rows changed since the last call
        (:meth:`changed_since`), so asking at every step of a long sweep costs what
        changed, not every row."""
        if self._counted is None or self._counted[1] != self.rewrites:
            self._status_of = {tid: row.get("status") or st.RUNNING
                               for tid, row in self.trials.items()}
            self._counts = st.count(self.trials.values())
            self.rows_counted += len(self.trials)
        else:
            for tid in self.changed_since(self._counted[0]):
                self.rows_counted += 1
                new = self.trials[tid].get("status") or st.RUNNING
                old = self._status_of.get(tid)
                if old != new:
                    if old is not None:
                        self._counts[old] -= 1
                    self._counts[new] = self._counts.get(new, 0) + 1
                    self._status_of[tid] = new
        self._counted = (self.version, self.rewrites)
        return {k: v for k, v in self._counts.items() if v}

    def best(self) -> dict[str, Any] | None:
        """The row with the best ``best_value``, or ``None`` if no trial has one; with
        constraints, of the feasible rows only (an infeasible trial is never the best)."""
        objective = self.spec.objective
        scored = [r for r in self.trials.values()
                  if math.isfinite(objective.score(r.get("best_value")))
                  and r.get("feasible") is not False]
        return min(scored, key=lambda r: objective.score(r["best_value"])) if scored else None
