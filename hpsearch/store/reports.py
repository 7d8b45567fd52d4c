"""What one report becomes in the trial tables: the report cleaned for the record, its
history rows (the report's and its ``log_every`` rows), and the status a trial ends with.

Plain functions over plain mappings (no Ray, no pandas), used by
:class:`~hpsearch.store.records.TrialRecords` and by the trial runners.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from hpsearch.space.spec import Objective, Spec
from hpsearch.store import status as st

__all__ = ["FIRST_STEP_AT", "OBJECTIVE_MISSING", "TRAIN_LOG", "TUNE_KEYS", "epoch_seconds",
           "final_status", "history_row", "is_nan", "is_nat", "log_rows", "report_key",
           "sanitize_report"]

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
