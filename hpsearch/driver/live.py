"""The live sweep, as the objects Tune pickles see it.

Tune pickles its searcher, scheduler, stopper and callbacks with every experiment
checkpoint. Holding the sweep's records in them would pickle the whole history each
time, so they hold the sweep directory's path and look the live records up here. One
driver process runs one sweep, so this table has one entry in practice.
"""

from __future__ import annotations

from typing import Any

__all__ = ["note_tune_trials", "records", "register", "register_watch", "tune_trials", "watch"]

_RECORDS: dict[str, Any] = {}
_TUNE_TRIALS: dict[str, set[str]] = {}
_WATCHES: dict[str, Any] = {}


def register_watch(sweep: Any, watch: Any) -> None:
    """The sweep's stall watch, which the stopper asks whether to end the sweep."""
    _WATCHES[str(sweep)] = watch


def watch(sweep: Any) -> Any:
    return _WATCHES.get(str(sweep))


def register(sweep: Any, records: Any) -> None:
    """Make ``records`` the live records of ``sweep`` (a SweepDir or its path)."""
    _RECORDS[str(sweep)] = records


def records(sweep: Any) -> Any:
    """The live records of ``sweep``, or ``None`` outside its driver."""
    return _RECORDS.get(str(sweep))


def note_tune_trials(sweep: Any, trial_ids: set[str]) -> None:
    """The trials Tune holds now (set at each step of the experiment)."""
    _TUNE_TRIALS[str(sweep)] = set(trial_ids)


def tune_trials(sweep: Any) -> set[str]:
    return _TUNE_TRIALS.get(str(sweep), set())
