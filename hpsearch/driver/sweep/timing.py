"""A sweep's deadline, resolved once per run, and the plan a run records."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from hpsearch.space.spec import Spec

if TYPE_CHECKING:
    from hpsearch.driver.limits.plan import Plan

__all__ = ["deadline_at", "iso", "plan_record", "still_ahead"]


def deadline_at(spec: Spec) -> float | None:
    """The spec's deadline as epoch seconds, resolved now (``07:00`` is the next 07:00).

    Raises:
        InvalidArgumentError: The deadline cannot be read.
    """
    if not spec.budget.deadline:
        return None
    from hpsearch.errors import InvalidArgumentError
    from hpsearch.space.duration import parse_deadline

    try:
        return parse_deadline(spec.budget.deadline).timestamp()
    except ValueError as exc:
        raise InvalidArgumentError(f"budget.deadline: {exc}") from None


def iso(epoch: float | None) -> str | None:
    """Epoch seconds as a local ISO time, or ``None``."""
    if epoch is None:
        return None
    from datetime import datetime

    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def still_ahead(recorded: str | None, stream: Any) -> float | None:
    """A recorded deadline (ISO), if it is still ahead; a passed one no longer applies
    (and ``stream`` hears so)."""
    if not recorded:
        return None
    from datetime import datetime

    try:
        at = datetime.fromisoformat(recorded).timestamp()
    except (TypeError, ValueError):
        return None
    if at <= time.time():
        print(f"the sweep's deadline {recorded} has passed; this run has none "
              "(give one with --deadline)", file=stream)
        return None
    return at


def plan_record(plan: Plan, *, max_concurrent: int | None, deadline: float | None) -> dict:
    """What the manifest records of a run's plan."""
    return {"slots": plan.slots, "rungs": list(plan.rungs), "max_concurrent": max_concurrent,
            "deadline": iso(deadline)}
