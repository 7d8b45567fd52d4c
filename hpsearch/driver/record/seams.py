"""The two seams where a feature attaches to a sweep's record
(:class:`~hpsearch.driver.record.sweep_record.SweepRecord`): a :class:`RecordWatcher`
changes how a trial ends, a :class:`RecordObserver` hears what the record took in.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Protocol, Sequence

__all__ = ["Observers", "RecordObserver", "RecordWatcher"]

logger = logging.getLogger(__name__)


class RecordWatcher(Protocol):
    """A feature that changes how trials end (the full-disk watch is one)."""

    def pauses(self, trial_id: str) -> bool:
        """Whether ``trial_id``, which errored, is paused (left unfinished) instead."""

    def write_failed(self, what: str, error: BaseException) -> bool:
        """``error`` met the record's write of ``what``; whether the watcher handles it."""


class RecordObserver(Protocol):
    """A feature that follows the record (a tracker is one). Each call gets copies, made
    in the driver's thread, and must return at once: slow work belongs on a thread of the
    observer's own."""

    def began(self, record: Any) -> None:
        """Attached to ``record`` (the sweep's record), whose rows and history are what
        came before (a resumed sweep's trials, or none)."""

    def started(self, trial_id: str, row: Mapping[str, Any]) -> None:
        """The trial started (again, after a failure Tune retries)."""

    def reported(self, trial_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """One report of the trial, as the history rows it added (the logged training
        rows first, then the report's own)."""

    def ended(self, trial_id: str, row: Mapping[str, Any]) -> None:
        """The trial ended with ``row["status"]``; again when its error's line is known."""

    def closed(self, status: str, record: Any) -> None:
        """This run of the sweep ended with the sweep status ``status``."""


class Observers:
    """The record's observers; one that raises is detached, and the sweep goes on."""

    def __init__(self) -> None:
        self._all: list[RecordObserver] = []

    def __bool__(self) -> bool:
        return bool(self._all)

    def attach(self, observer: RecordObserver, record: Any) -> None:
        """Attach ``observer``, which hears :meth:`RecordObserver.began` at once."""
        self._all.append(observer)
        self._call(observer, "began", record)

    def tell(self, event: str, *args: Any) -> None:
        """Every observer hears ``event`` (a :class:`RecordObserver` method's name)."""
        for observer in list(self._all):
            self._call(observer, event, *args)

    def _call(self, observer: RecordObserver, event: str, *args: Any) -> None:
        try:
            getattr(observer, event)(*args)
        except Exception:  # noqa: BLE001 - a feature must not end the sweep
            logger.warning("%s failed on %r and is detached from the sweep's record",
                           type(observer).__name__, event, exc_info=True)
            self._all.remove(observer)
