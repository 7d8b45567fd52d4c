"""The sweep's trackers as one observer of its record: :class:`Tracking`.

The record tells :class:`Tracking` what it took in, on the driver's thread; each tracker
gets those events in order on a thread of its own, so a tracker that is down or slow
never stalls a report or fails a trial. When a call fails because the tracker is away,
one line says so and the call is made again, later and later (up to every 30 s), until it
answers: then one line says it is back, and the queued events follow, none lost. What is
still queued when the run closes gets a few seconds, then one line names what was not
sent and how to send it (``hpsearch export``, or ``hpsearch resume``, which catches up).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from hpsearch.track.base import SweepFacts, Tracker

__all__ = ["Tracking", "facts_of"]

logger = logging.getLogger(__name__)

#: How long :meth:`Tracking.closed` waits for each tracker to take what is queued.
DRAIN_S = 15.0
_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
_STOP = object()


def facts_of(record: Any) -> SweepFacts:
    """The :class:`SweepFacts` of a sweep's record (or anything with its ``spec``,
    ``sweep`` and ``manifest``)."""
    spec, sweep = record.spec, record.sweep
    files = {}
    if sweep is not None:
        try:
            files[sweep.space.name] = sweep.space.read_text()
        except OSError:
            pass
        files[sweep.manifest.name] = json.dumps(record.manifest or {}, indent=1, default=str)
    return SweepFacts(
        name=sweep.name if sweep is not None else spec.name,
        path=str(sweep.path) if sweep is not None else "",
        params=tuple(p.name for p in spec.params), fixed=dict(spec.fixed),
        time_attr=spec.scheduler.result_key,
        sweep_id=_sweep_id(spec.name if sweep is None else sweep.name, record.manifest),
        objectives=tuple((o.metric, o.mode) for o in spec.objectives), files=files)


def _sweep_id(name: str, manifest: Mapping[str, Any] | None) -> str:
    made = (manifest or {}).get("started_at")
    return f"{name}@{made}" if made else name


class _Pump:
    """One tracker's queue and thread."""

    def __init__(self, tracker: Tracker, say: Callable[[str], None]):
        self.tracker = tracker
        self.say = say
        self.queue: queue.Queue = queue.Queue()
        self.down_since: float | None = None
        self.refused = 0
        self.put_count = 0  # by the driver's thread
        self.done_count = 0  # by the pump's: taken (sent, or noted for a flush) or refused
        self.unflushed = False  # events taken and not yet flushed
        self.closing_by: float | None = None
        self.thread = threading.Thread(target=self._run, name=f"hpsearch-track-{tracker.where}",
                                       daemon=True)
        self.thread.start()

    def put(self, name: str, *args: Any) -> None:
        self.put_count += 1
        self.queue.put((name, args))

    def close(self, wait_s: float) -> int:
        """Stop after what is queued, waiting up to ``wait_s``; returns how many events
        were not sent."""
        self.closing_by = time.monotonic() + wait_s
        self.queue.put(_STOP)
        self.thread.join(wait_s + 1.0)
        self._release()
        return self.put_count - self.done_count + (1 if self.unflushed else 0)

    def _release(self) -> None:
        if self.thread.is_alive():
            return  # still inside a call; the daemon thread dies with the process
        try:
            self.tracker.release()
        except Exception:  # noqa: BLE001
            pass

    def _run(self) -> None:
        """Take every event queued, then flush: a backlog (a slow server, a burst of
        trials) goes out in as few requests as the tracker can make of it."""
        while True:
            items = [self.queue.get()]
            while items[-1] is not _STOP:
                try:
                    items.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            for item in items:
                if item is _STOP:
                    if self._call("flush", ()):
                        self.unflushed = False
                    return
                name, args = item
                if not self._call(name, args):
                    return
                self.done_count += 1
                self.unflushed = True
            if not self._call("flush", ()):
                return
            self.unflushed = False

    def _call(self, name: str, args: Sequence[Any]) -> bool:
        """Make one call until it passes, is refused, or the close's time is up (then
        ``False``: the thread stops, the rest stays queued)."""
        tries = 0
        while True:
            try:
                getattr(self.tracker, name)(*args)
            except Exception as exc:  # noqa: BLE001 - a tracker never ends the sweep
                if not self.tracker.transient(exc):
                    self.refused += 1
                    if self.refused == 1:
                        self.say(f"{self.tracker.where} refused an update ({_line(exc)}); "
                                 "the sweep goes on")
                    logger.debug("%s refused %s", self.tracker.where, name, exc_info=True)
                    return True
                if self.down_since is None:
                    self.down_since = time.monotonic()
                    self.say(f"{self.tracker.where} does not answer ({_line(exc)}); the sweep "
                             "goes on, and its runs catch up when it is back")
                wait = _BACKOFF_S[min(tries, len(_BACKOFF_S) - 1)]
                tries += 1
                if self.closing_by is not None and time.monotonic() + wait > self.closing_by:
                    return False
                time.sleep(wait)
                continue
            if self.down_since is not None:
                self.say(f"{self.tracker.where} answers again after "
                         f"{time.monotonic() - self.down_since:.0f} s; catching up")
                self.down_since = None
            return True


class Tracking:
    """Every tracker of a sweep, as one observer of its record
    (:class:`~hpsearch.driver.record.sweep_record.RecordObserver`).

    Args:
        trackers: The trackers, each already checked (:meth:`Tracker.check`).
        say: Prints a line for people (the progress log).
        hint: How to send what a run could not: ``hpsearch export NAME ...``.
        drain_s: How long the close waits for each tracker.
    """

    def __init__(self, trackers: Sequence[Tracker], *, say: Callable[[str], None],
                 hint: str = "", drain_s: float = DRAIN_S):
        self.say = say
        self.drain_s = drain_s
        self.hint = hint
        self.pumps = [_Pump(t, say) for t in trackers]
        self.facts: SweepFacts | None = None

    def __getstate__(self):
        # Tune pickles the Tuner's plug-ins, and the record with them, into tuner.pkl,
        # which hpsearch never reads; threads and queues do not pickle.
        return {}

    def _all(self, name: str, *args: Any) -> None:
        for pump in self.pumps:
            pump.put(name, *args)

    def began(self, record: Any) -> None:
        self.facts = facts_of(record)
        trials = [{k: v for k, v in row.items() if k != "last"}
                  for row in record.rows.trials.values()]
        self._all("sync", self.facts, trials, list(record.rows.history))

    def started(self, trial_id: str, row: Mapping[str, Any]) -> None:
        self._all("started", trial_id, row)

    def reported(self, trial_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._all("reported", trial_id, list(rows))

    def ended(self, trial_id: str, row: Mapping[str, Any]) -> None:
        self._all("ended", trial_id, row)

    def closed(self, status: str, record: Any) -> None:
        """Ends the sweep's run in each tracker, waits for what is queued (at most
        ``drain_s``), and says what could not be sent."""
        facts = facts_of(record)
        best = record.best()
        front = [{k: v for k, v in r.items() if k != "last"} for r in record.front()]
        self._all("closed", status, facts, best and {k: v for k, v in best.items()
                                                     if k != "last"}, front)
        deadline = time.monotonic() + self.drain_s
        for pump in self.pumps:
            left = pump.close(max(0.0, deadline - time.monotonic()))
            if left:
                self.say(f"{pump.tracker.where} did not take every update of this run; "
                         f"{self.hint or 'hpsearch resume'} sends the rest")


def _line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]
