"""What a run of a sweep returns, and how its ending maps to an exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpsearch.errors import HpsearchError
from hpsearch.store import status as st

if TYPE_CHECKING:
    from hpsearch.driver.limits.plan import Plan

__all__ = ["EXIT_INTERRUPTED", "Interrupted", "SweepResult"]

EXIT_OK, EXIT_NO_TRIAL, EXIT_INTERRUPTED = 0, 3, 130


class Interrupted(HpsearchError, KeyboardInterrupt):
    """Ctrl-C stopped the sweep; the tables are written and it can be resumed.

    Also a ``KeyboardInterrupt``, so that a loop of sweeps or a test session that called
    the sweep stops too instead of going on to the next one."""

    exit_code = EXIT_INTERRUPTED


@dataclass
class SweepResult:
    """What :func:`hpsearch.run_sweep` and :func:`hpsearch.resume_sweep` return.

    Attributes:
        sweep_dir: The sweep directory.
        status: ``finished``, ``deadline`` (the deadline ended it; trials that ran are in
            the tables), ``no_trial_completed``, ``all_failed``, ``missing_metric``,
            ``interrupted``, ``stalled`` or ``planned`` (the ``SWEEP_*`` constants of
            :mod:`hpsearch.store.status`).
        plan: Slots, rungs and cost estimate.
        best: The best trial's row of the trial table (``None`` if none has a value).
        counts: Trials per status.
        front: With several objectives, the rows of the trials on the Pareto front (their
            ``pareto`` is true), in table order.
    """

    sweep_dir: Path
    status: str
    plan: Plan
    best: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    front: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {st.SWEEP_FINISHED: EXIT_OK, st.SWEEP_PLANNED: EXIT_OK, st.SWEEP_DEADLINE: EXIT_OK,
                st.SWEEP_INTERRUPTED: EXIT_INTERRUPTED}.get(self.status, EXIT_NO_TRIAL)
