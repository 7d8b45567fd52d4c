"""Trial and sweep statuses: the values of the trial table's ``status`` column and of the
manifest's ``status``, and what they mean together.

Trial statuses (``trials.parquet``):

=====================  ==================================================================
``completed``          trained to the end of its budget (``scheduler.max_t``)
``stopped_by_asha``    ASHA stopped it at a rung: it was not among the best there
``stopped``            the sweep ended around it (time budget, deadline, all-failed stop)
``diverged``           its training loss became non-finite; training stopped
``unsupported_precision``  the hardware cannot run its precision; nothing trained
``failed``             its code raised (after the retries ``trials.max_failures`` allows)
``running``            started, not ended
``pending``            created, no report yet
=====================  ==================================================================

Sweep statuses (``manifest.json``, :attr:`hpsearch.SweepResult.status`, and the
``HPSEARCH_STATUS`` a notify command gets) are the ``SWEEP_*`` constants below, each with
its meaning; :data:`SWEEP_STATUSES` lists them. ``planned``, ``failed`` and ``crashed``
are never written to a manifest: they say how a command ended (a dry run, a run that
raised).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["COMPLETED", "STOPPED_BY_ASHA", "STOPPED", "DIVERGED", "UNSUPPORTED_PRECISION",
           "FAILED", "RUNNING", "PENDING", "STATUSES", "ENDED", "UNFINISHED", "WITH_RESULT",
           "count", "is_ended", "SWEEP_RUNNING", "SWEEP_FINISHED", "SWEEP_DEADLINE",
           "SWEEP_NO_TRIAL_COMPLETED", "SWEEP_ALL_FAILED", "SWEEP_MISSING_METRIC",
           "SWEEP_INTERRUPTED", "SWEEP_STALLED", "SWEEP_DISK_FULL", "SWEEP_PLANNED",
           "SWEEP_FAILED", "SWEEP_CRASHED", "SWEEP_STATUSES"]

COMPLETED = "completed"
STOPPED_BY_ASHA = "stopped_by_asha"
STOPPED = "stopped"
DIVERGED = "diverged"
UNSUPPORTED_PRECISION = "unsupported_precision"
FAILED = "failed"
RUNNING = "running"
PENDING = "pending"

#: Every status, in the order the docs list them.
STATUSES = (COMPLETED, STOPPED_BY_ASHA, STOPPED, DIVERGED, UNSUPPORTED_PRECISION, FAILED,
            RUNNING, PENDING)
#: Not ended yet.
UNFINISHED = frozenset({RUNNING, PENDING})
#: Ended: the row is final.
ENDED = frozenset(STATUSES) - UNFINISHED
#: Ended with a usable objective value (a sweep with none of these found nothing).
WITH_RESULT = frozenset({COMPLETED, STOPPED_BY_ASHA, STOPPED})
#: Reported by the training loop itself on its last report.
FROM_LOOP = frozenset({COMPLETED, DIVERGED, UNSUPPORTED_PRECISION})

#: A driver is running the sweep (or died: ``driver_alive`` in the manifest tells).
SWEEP_RUNNING = "running"
#: Every planned trial ended, or the time budget did, and some trial has a value.
SWEEP_FINISHED = "finished"
#: ``budget.deadline`` came (or left no time to start a trial); what ran is in the tables.
SWEEP_DEADLINE = "deadline"
#: The sweep ended and no trial produced a usable objective value.
SWEEP_NO_TRIAL_COMPLETED = "no_trial_completed"
#: The first trials to end all failed, so the sweep stopped early.
SWEEP_ALL_FAILED = "all_failed"
#: A trial's first report lacked a metric the objectives or constraints name: it stopped.
SWEEP_MISSING_METRIC = "missing_metric"
#: Ctrl-C stopped it; its running trials stay unfinished, and ``resume`` continues them.
SWEEP_INTERRUPTED = "interrupted"
#: Nothing started, reported or ended for a long time while resources were pending.
SWEEP_STALLED = "stalled"
#: Its disk filled; its trials are paused, and ``resume`` continues them once space is freed.
SWEEP_DISK_FULL = "disk_full"
#: A dry run: the plan was made and no trial started (never in a manifest).
SWEEP_PLANNED = "planned"
#: The run raised an hpsearch error before its sweep ended (never in a manifest).
SWEEP_FAILED = "failed"
#: The run raised anything else, set-up included (never in a manifest).
SWEEP_CRASHED = "crashed"

#: Every sweep status, those a manifest may hold first.
SWEEP_STATUSES = (SWEEP_RUNNING, SWEEP_FINISHED, SWEEP_DEADLINE, SWEEP_NO_TRIAL_COMPLETED,
                  SWEEP_ALL_FAILED, SWEEP_MISSING_METRIC, SWEEP_INTERRUPTED, SWEEP_STALLED,
                  SWEEP_DISK_FULL, SWEEP_PLANNED, SWEEP_FAILED, SWEEP_CRASHED)


def is_ended(status: Any) -> bool:
    return status in ENDED


def count(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many rows have each status (a missing status counts as running)."""
    out: dict[str, int] = {}
    for row in rows:
        status = row.get("status") or RUNNING
        out[status] = out.get(status, 0) + 1
    return out
