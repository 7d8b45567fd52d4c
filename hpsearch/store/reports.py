"""What one report becomes in the trial tables: the report cleaned for the record, its
history rows (the report's and its ``log_every`` rows), the status a trial ends with, and
with several objectives each objective's value and the ``pareto`` flag
(:func:`front_for`).

Plain functions over plain mappings (no Ray, no pandas), used by
:class:`~hpsearch.store.records.TrialRecords` and by the trial runners.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from hpsearch.space.spec import Objective, Spec, pareto_front
from hpsearch.store import status as st

__all__ = ["FIRST_STEP_AT", "NO_FRONT", "OBJECTIVE_MISSING", "TRAIN_LOG", "TUNE_KEYS",
           "ParetoFront", "epoch_seconds", "final_status", "front_for", "history_row", "is_nan",
           "is_nat", "log_rows", "report_key", "sanitize_report"]

#: Set on a report that lacked the objective metric (it then carries the worst value):
#: a trial whose every report had it never reported its objective, and fails.
OBJECTIVE_MISSING = "hpsearch_objective_missing"

#: Report key: the wall clock (epoch seconds) of the trial's first training step, set by
#: the harness. The row's ``startup_s`` is it minus the row's ``started_at``.
FIRST_STEP_AT = "first_step_at"

#: Result keys that are Tune bookkeeping rather than training metrics.
TUNE_KEYS = frozenset(
    {
        "config", "date", "done", "experiment_tag", "hostname", "iterations_since_restore",
        "node_ip", "pid", "should_checkpoint", "time_since_restore", "time_this_iter_s",
        "timestamp", "timesteps_since_restore", "timesteps_total", "episodes_total",
        "trial_id", "checkpoint_dir_name", "checkpoint_path", "checkpoint", OBJECTIVE_MISSING,
        "train_log",
        FIRST_STEP_AT,
    }
)


def sanitize_report(metrics: Mapping[str, Any], objective: Objective) -> dict[str, Any]:
    """Make a report safe for ASHA and Optuna.

    A missing or non-finite objective (a diverged run, an unsupported precision, a raw loop
    that reports other metrics) becomes the worst value for the mode: Optuna rejects NaN,
    ASHA's cut-offs ignore it, and a missing key crashes the searcher. A missing one is
    also marked with :data:`OBJECTIVE_MISSING`, so the trial can be judged by what it
    really reported.
    """
    out = {k: v for k, v in metrics.items() if k != "checkpoint"}
    value = out.get(objective.metric)
    if value is None and objective.metric not in out:
        out[OBJECTIVE_MISSING] = True
    if not math.isfinite(objective.score(value)):
        out[objective.metric] = objective.worst
    return out


def history_row(trial_id: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """One history row: ``trial_id``, ``step``, ``epoch``, ``time_total_s`` and every
    scalar metric of the report."""
    row: dict[str, Any] = {"trial_id": trial_id}
    for key, value in result.items():
        if key in TUNE_KEYS or not _is_scalar(value):
            continue
        row[key] = value
    row.setdefault("step", result.get("training_iteration"))
    row.setdefault("epoch", None)
    row["evaluated"] = True
    return row


#: The harness's ``log_every`` rows, carried by the next report (``hpsearch.train.loop``).
TRAIN_LOG = "train_log"


def log_rows(trial_id: str, result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """History rows of the training metrics logged between two reports (``log_every``):
    ``evaluated`` is False, and ``time_total_s`` is the report's less each row's age."""
    logged = result.get(TRAIN_LOG)
    if not isinstance(logged, list):
        return []
    total = result.get("time_total_s")
    rows = []
    for entry in logged:
        if not isinstance(entry, Mapping):
            continue
        row: dict[str, Any] = {"trial_id": trial_id}
        row.update({k: v for k, v in entry.items() if k != "age_s" and _is_scalar(v)})
        age = entry.get("age_s")
        row["time_total_s"] = (total - age if isinstance(total, (int, float))
                               and isinstance(age, (int, float)) else None)
        row["evaluated"] = False
        rows.append(row)
    return rows


def final_status(
    last: Mapping[str, Any] | None,
    *,
    spec: Spec,
    errored: bool = False,
    finished: bool = True,
    budget_expired: bool = False,
    stopped_early: bool | None = None,
) -> str:
    """Status of a trial from its last report and how it ended.

    Args:
        stopped_early: Whether ASHA stopped it at a rung. ``None`` (not known): a trial of
            an ASHA sweep that ended before ``max_t`` counts as stopped by ASHA.
    """
    if errored:
        return st.FAILED
    if not finished:
        return st.RUNNING if last else st.PENDING
    if not last:  # ended before its first report (budget, stop of the whole sweep)
        return st.STOPPED
    reported = last.get("status")
    if reported in st.FROM_LOOP:
        return reported
    reached = last.get(spec.scheduler.result_key)
    if reached is not None and float(reached) >= spec.scheduler.max_t:
        return st.COMPLETED
    if budget_expired:
        return st.STOPPED
    if stopped_early is None:
        stopped_early = spec.scheduler.type == "asha"
    return st.STOPPED_BY_ASHA if stopped_early else st.COMPLETED


def report_key(row: Mapping[str, Any]) -> tuple:
    """What makes a history row one of its own: a trial's report (or ``log_every`` row) at
    a step. A report recovered from the study has no step, only its time attribute."""
    step = row.get("step")
    if step is None:
        step = ("from_study", row.get("epoch"), row.get("time_total_s"))
    return row["trial_id"], step, row.get("evaluated") is not False


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def is_nat(value: Any) -> bool:
    """A missing time read back from the trial table (pandas' ``NaT``)."""
    return hasattr(value, "timestamp") and value != value


def epoch_seconds(value: Any) -> float | None:
    """A time as epoch seconds: live rows hold floats, rows read back from the trial table
    hold pandas ``Timestamp``s (kept as they are, so a rewrite keeps them to the ns)."""
    if value is None or isinstance(value, (int, float)):
        return value
    if hasattr(value, "timestamp"):
        try:
            return None if value != value else float(value.timestamp())  # NaT != NaT
        except (TypeError, ValueError, OverflowError):
            return None
    return None


def is_nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class ParetoFront:
    """The front of a sweep of several ``objectives``, kept as trials end.

    Each row keeps every objective's value at its last report (:meth:`values`), and
    ``pareto`` marks the completed, feasible trials no other such trial dominates. A
    newcomer joins the front unless a member dominates it, and pushes out the members it
    dominates: an end costs the front's size, not the table's. The first end after
    :meth:`reset` (a resume's loaded rows) builds the front from every row first. The
    front only proposes marks; the records apply them, since one module changes rows.

    Example:
        >>> from hpsearch.space.spec import Objective
        >>> front = ParetoFront((Objective("loss", "min"), Objective("speed", "max")))
        >>> rows = {"a": {"status": "completed", "loss": 0.5, "speed": 1.0}}
        >>> front.settle(rows, "a")
        {'a': True}
        >>> rows["b"] = {"status": "completed", "loss": 0.4, "speed": 2.0}  # better at both
        >>> front.settle(rows, "b")
        {'a': False, 'b': True}
    """

    def __init__(self, objectives: Sequence[Objective]):
        self.objectives = tuple(objectives)
        self.members: list[str] | None = None

    def values(self, report: Mapping[str, Any]) -> dict[str, Any]:
        """The row's value of each objective, from its last report."""
        return {o.metric: report.get(o.metric) for o in self.objectives}

    def reset(self) -> None:
        """Forget the front: the rows were replaced."""
        self.members = None

    def settle(self, rows: Mapping[str, Mapping[str, Any]], trial_id: str) -> dict[str, bool]:
        """``{trial id: pareto}`` to set after ``trial_id`` ended (or changed)."""
        marks: dict[str, bool] = {}
        if self.members is None:
            self.members = []
            for other in [t for t in rows if t != trial_id]:
                self._join(rows, other, marks)
        self._join(rows, trial_id, marks)
        return marks

    def _join(self, rows: Mapping[str, Mapping[str, Any]], trial_id: str,
              marks: dict[str, bool]) -> None:
        assert self.members is not None
        if trial_id in self.members:
            self.members.remove(trial_id)
        row = rows[trial_id]
        point = [row.get(o.metric) for o in self.objectives]
        eligible = (row.get("status") == st.COMPLETED and row.get("feasible") is not False
                    and len(pareto_front([point], self.objectives)) == 1)
        if eligible:
            members = [[rows[t].get(o.metric) for o in self.objectives] for t in self.members]
            on = pareto_front([*members, point], self.objectives)
            eligible = len(members) in on
            for i in [i for i in range(len(members)) if i not in on]:
                marks[self.members[i]] = False
            self.members = [t for i, t in enumerate(self.members) if i in on]
        if eligible:
            self.members.append(trial_id)
        if row.get("status") in st.ENDED:
            marks[trial_id] = eligible


class _NoFront:
    """One objective: no objective columns, no ``pareto``."""

    def values(self, report: Mapping[str, Any]) -> dict[str, Any]:
        return {}

    def reset(self) -> None:
        pass

    def settle(self, rows: Mapping[str, Mapping[str, Any]], trial_id: str) -> dict[str, bool]:
        return {}


#: The rule of a sweep of one objective.
NO_FRONT = _NoFront()


def front_for(spec: Spec) -> ParetoFront | _NoFront:
    """The rows' rule for ``spec``'s objectives: a :class:`ParetoFront` with several,
    :data:`NO_FRONT` (which adds nothing) with one, so the records never branch on it."""
    return ParetoFront(spec.objectives) if spec.several_objectives else NO_FRONT
