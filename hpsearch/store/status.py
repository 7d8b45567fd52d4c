"""Trial statuses: the values of the ``status`` column, and what they mean together.

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
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["COMPLETED", "STOPPED_BY_ASHA", "STOPPED", "DIVERGED", "UNSUPPORTED_PRECISION",
           "FAILED", "RUNNING", "PENDING", "STATUSES", "ENDED", "UNFINISHED", "WITH_RESULT",
           "count", "is_ended"]

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


def is_ended(status: Any) -> bool:
    return status in ENDED


def count(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many rows have each status (a missing status counts as running)."""
    out: dict[str, int] = {}
    for row in rows:
        status = row.get("status") or RUNNING
        out[status] = out.get(status, 0) + 1
    return out
