"""What every tracker is: :class:`Tracker`, fed from a sweep's record as plain data.

A tracker mirrors the record; it never is one. Everything it is told comes from the
trial rows and the history (``docs/trial-tables.md``), so one code path serves a live sweep
(:class:`~hpsearch.track.pump.Tracking`, an observer of the record), a resumed one and an
export after the fact (:func:`~hpsearch.track.export.export_sweep`): :meth:`Tracker.sync`
brings the tracker up to the record, and does nothing the second time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from hpsearch.errors import is_disk_full
from hpsearch.store import status as st

__all__ = ["Steps", "SweepFacts", "Tracker", "TrackError", "numeric_metrics"]

#: History columns that place a report rather than measure anything.
PLACING = frozenset({"trial_id", "step", "evaluated"})


class TrackError(Exception):
    """A tracker cannot be reached or refused what it was sent (one line)."""


@dataclass(frozen=True)
class SweepFacts:
    """What a tracker knows of the sweep besides its trials.

    Attributes:
        name: The sweep's name.
        sweep_id: What tells this sweep from another of the same name (one made again with
            ``--overwrite``, or in another storage): its name and when it was made.
        path: Its directory, as text.
        params: The searched parameters' names.
        fixed: The fixed values every trial gets.
        objectives: ``(metric, mode)`` of each objective, the first one first.
        time_attr: The scheduler's time attribute (a report without a step is placed by
            it: :class:`Steps`).
        files: The sweep's own files a tracker keeps beside its runs (the space as run,
            the manifest), by file name.
    """

    name: str
    path: str
    params: tuple[str, ...]
    objectives: tuple[tuple[str, str], ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    sweep_id: str = ""
    time_attr: str = "training_iteration"

    @property
    def identity(self) -> str:
        return self.sweep_id or self.name
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return self.objectives[0][0]


class Tracker:
    """One place the sweep's trials are written to (MLflow, TensorBoard).

    Every method may raise; :class:`~hpsearch.track.pump.Tracking` calls them on a thread
    of their own, says the first failure in one line, and calls again until the tracker
    answers (:meth:`transient`) or drops what it refuses for good.

    A tracker keeps, per trial, how many of its history rows it has sent, where it can
    read that number back (an MLflow tag, a file beside the event files), so that
    :meth:`sync` sends each row once, across resumes and exports.
    """

    #: Says where, for the lines people read: ``MLflow at http://...``.
    where: str = "tracker"
    #: History rows this tracker object has written (what an export added).
    rows_sent: int = 0

    def check(self) -> None:
        """Reach the tracker once; raises :class:`TrackError` with one line if it cannot."""

    def sync(self, facts: SweepFacts, trials: Sequence[Mapping[str, Any]],
             history: Sequence[Mapping[str, Any]]) -> None:
        """Bring the tracker up to the record: a run per trial, the history rows it lacks,
        each ended trial's end. Idempotent."""
        raise NotImplementedError

    def started(self, trial_id: str, row: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def reported(self, trial_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        raise NotImplementedError

    def ended(self, trial_id: str, row: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def closed(self, status: str, facts: SweepFacts, best: Mapping[str, Any] | None,
               front: Sequence[Mapping[str, Any]]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Send what the events before it noted: the pump calls it once it has taken
        every event queued, so a tracker may gather a backlog into few requests. A
        tracker that sends as each event comes needs none."""

    def transient(self, error: BaseException) -> bool:
        """Whether ``error`` may pass if the call is made again later (the tracker is down
        or slow, the disk is full), rather than being a refusal of what was sent."""
        return isinstance(error, (ConnectionError, TimeoutError)) or is_disk_full(error)

    def release(self) -> None:
        """Let go of files and connections (after the last call)."""


def numeric_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """The metrics of a history row a tracker can plot: its finite or NaN numbers (not
    booleans), without the columns that only place it (``step``...)."""
    out = {}
    for key, value in row.items():
        if key in PLACING or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out[key] = float(value)
    return out


def _finite(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


class Steps:
    """Where each history row goes on its trial's curve, and which rows the curve holds.

    A row goes at its ``step``. A report recovered from the study after a killed driver
    has none (``docs/trial-tables.md``, ``from_study``), only its time attribute: it goes at
    that value times the steps per unit of it the trial's rows show (``epoch`` 3 at 22
    steps an epoch: step 66), or at the value itself.

    A curve holds, per kind of row (reports, and the ``log_every`` training rows), every
    step up to its mark (:meth:`marks`): a tracker keeps the marks where it can read them
    back (an MLflow tag, a file beside the event files), so that a resumed sweep or an
    export sends each step once, whatever order the record rebuilt its history in and
    whatever a trial restarted from an older checkpoint reports again.

    Args:
        time_attr: The scheduler's time attribute (``epoch``, ``step``...).
    """

    #: The two kinds of row, as :meth:`marks` names them.
    REPORTS, LOGS = "last_step", "last_log_step"

    def __init__(self, time_attr: str):
        self.time_attr = time_attr
        self._per: dict[str, float] = {}  # trial id -> steps per unit of the time attr
        self._marks: dict[str, dict[str, int]] = {}  # trial id -> kind -> last step held

    def learn(self, trial_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Take the steps per unit of the time attribute from the trial's rows (a resume's
        whole history, before any of it is placed)."""
        for row in rows:
            self.of(trial_id, row)

    def of(self, trial_id: str, row: Mapping[str, Any]) -> int:
        """The row's step (and what it shows of the steps per unit)."""
        step, t = row.get("step"), row.get(self.time_attr)
        if _finite(step):
            if _finite(t) and t > 0:
                self._per[trial_id] = step / t
            return int(step)
        if _finite(t):
            return int(round(t * self._per.get(trial_id, 1.0)))
        return 0

    def due(self, trial_id: str, rows: Sequence[Mapping[str, Any]]
            ) -> list[tuple[int, Mapping[str, Any]]]:
        """The rows the curve lacks, in order, each with its step: a row at or before its
        kind's mark, or before a row of its kind earlier in ``rows``, is one the curve
        holds (or a repeat)."""
        marks = dict(self._marks.get(trial_id, {}))
        out = []
        for row in rows:
            step = self.of(trial_id, row)
            kind = _kind(row)
            if kind in marks and step <= marks[kind]:
                continue
            marks[kind] = step
            out.append((step, row))
        return out

    def sent(self, trial_id: str, placed: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
        """The curve holds ``placed`` (what :meth:`due` gave) now: the marks move on."""
        _advance(self._marks.setdefault(trial_id, {}), placed)

    def marks(self, trial_id: str,
              placed: Sequence[tuple[int, Mapping[str, Any]]] = ()) -> dict[str, int]:
        """The trial's marks (``{"last_step": 718, "last_log_step": 700}``), as they will be
        once ``placed`` is sent too."""
        marks = dict(self._marks.get(trial_id, {}))
        _advance(marks, placed)
        return marks

    def restore_count(self, trial_id: str, count: Any,
                      rows: Sequence[Mapping[str, Any]]) -> None:
        """The marks of a curve an earlier hpsearch kept as a count of rows (MLflow's
        ``hpsearch.rows_sent``, a TensorBoard state file's ``rows`` alone): the first
        ``count`` of the trial's ``rows`` are on it. Nothing where marks are known."""
        try:
            count = int(count or 0)
        except (TypeError, ValueError):
            return
        if count > 0 and not self._marks.get(trial_id):
            self.sent(trial_id, self.due(trial_id, rows[:count]))

    def restore(self, trial_id: str, marks: Mapping[str, Any]) -> None:
        """The marks read back from where a tracker kept them (values as text or numbers;
        others are ignored)."""
        held = {}
        for kind in (self.REPORTS, self.LOGS):
            try:
                held[kind] = int(marks[kind])
            except (KeyError, TypeError, ValueError):
                pass
        self._marks[trial_id] = held


def _kind(row: Mapping[str, Any]) -> str:
    """Which of a curve's marks a history row moves: a report's or a ``log_every`` row's."""
    return Steps.REPORTS if row.get("evaluated") is not False else Steps.LOGS


def _advance(marks: dict[str, int], placed: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
    for step, row in placed:
        kind = _kind(row)
        marks[kind] = max(step, marks.get(kind, step))


#: How a trial's status ends its run: a tracker's three end states.
FINISHED, KILLED, FAILED = "FINISHED", "KILLED", "FAILED"


def end_state(status: str | None) -> str | None:
    """The run state of a trial status; ``None`` while it runs."""
    if status == st.COMPLETED:
        return FINISHED
    if status in (st.FAILED, st.UNSUPPORTED_PRECISION):
        return FAILED
    if status in st.ENDED:
        return KILLED
    return None
