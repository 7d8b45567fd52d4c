"""The live sweep, as the objects Tune pickles see it.

Tune pickles its searcher, scheduler, stopper and callbacks with every experiment
checkpoint. Holding the sweep's records in them would pickle the whole history each time,
so they look the live state up here instead.

A driver process runs one sweep at a time, so this module holds that one sweep's state:
the sweep registered last. The ``sweep`` arguments name it for readability, but lookups
do not depend on them, because Tune's pickled objects keep the path the sweep had when
it started, and a resumed sweep may have been moved or copied since.
"""

from __future__ import annotations

from typing import Any

__all__ = ["active_trials", "clear", "limits", "note_tune_trials", "records", "register", "register_limits",
           "register_watch", "tune_trials", "watch"]

_STATE: dict[str, Any] = {"records": None, "tune_trials": set(), "active": 0, "watch": None,
                          "limits": None}


def clear() -> None:
    """Forget the sweep: it has ended, and this process may run another or none."""
    _STATE.update(records=None, tune_trials=set(), active=0, watch=None, limits=None)


def register(sweep: Any, records: Any) -> None:
    """Make ``records`` the live records of the sweep this driver runs."""
    if _STATE["records"] is not records:
        _STATE.update(records=records, tune_trials=set(), active=0, watch=None, limits=None)


def records(sweep: Any = None) -> Any:
    """The live records, or ``None`` outside a driver."""
    return _STATE["records"]


def note_tune_trials(sweep: Any, trial_ids: set[str], active: int = 0) -> None:
    """The trials Tune holds now, and how many of them have not ended (set at each step of
    the experiment)."""
    _STATE["tune_trials"] = set(trial_ids)
    _STATE["active"] = active


def active_trials(sweep: Any = None) -> int:
    return _STATE["active"]


def tune_trials(sweep: Any = None) -> set[str]:
    return _STATE["tune_trials"]


def register_watch(sweep: Any, watch: Any) -> None:
    """The sweep's stall watch, which the stopper asks whether to end the sweep."""
    _STATE["watch"] = watch


def watch(sweep: Any = None) -> Any:
    return _STATE["watch"]


def register_limits(sweep: Any, limits: Any) -> None:
    """What may still start (planned trials, deadline): asked before each new trial."""
    _STATE["limits"] = limits


def limits(sweep: Any = None) -> Any:
    return _STATE["limits"]
