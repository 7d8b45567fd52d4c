"""Trackers: every trial of a sweep in MLflow and TensorBoard, live and after the fact.

A space's ``track:`` section (``docs/tracking.md``) names the trackers. While a sweep
runs, :class:`Tracking` follows its record (an observer of
:class:`~hpsearch.driver.record.sweep_record.SweepRecord`) and writes each trial to each
tracker from the driver, on threads of their own; :func:`export_sweep` writes a sweep from
its tables afterwards. Both go through one :class:`Tracker` interface whose
:meth:`~Tracker.sync` is idempotent, so a resume continues each trial's run and a second
export adds nothing. Imports no tracker library until one is used.
"""

from __future__ import annotations

from pathlib import Path

from hpsearch.errors import TrackingError
from hpsearch.space.spec import Track
from hpsearch.track.base import SweepFacts, Tracker, TrackError
from hpsearch.track.pump import Tracking

__all__ = ["SweepFacts", "TrackError", "Tracker", "Tracking", "check_trackers",
           "make_trackers"]

def make_trackers(track: Track, *, sweep_name: str,
                  tensorboard: str | Path | None = None) -> list[Tracker]:
    """The trackers ``track`` asks for, built (nothing is contacted yet).

    Raises:
        TrackingError: ``track.mlflow`` has no URI and ``$MLFLOW_TRACKING_URI`` is unset.
    """
    trackers: list[Tracker] = []
    if track.mlflow is not None:
        from hpsearch.track.mlflow_runs import MlflowTracker, resolve_tracking_uri

        try:
            uri = resolve_tracking_uri(track.mlflow.tracking_uri)
        except TrackError as exc:
            raise TrackingError(str(exc)) from None
        trackers.append(MlflowTracker(uri, track.mlflow.experiment or sweep_name))
    if track.tensorboard:
        from hpsearch.track.tensorboard_events import TensorBoardTracker

        trackers.append(TensorBoardTracker(Path(tensorboard)))
    return trackers


def check_trackers(trackers: list[Tracker], *,
                   fix: str = "fix track: in the space (or remove it)") -> None:
    """Reach each tracker once; ``fix`` says what to do about one that cannot be.

    Raises:
        TrackingError: One cannot be reached; the line says which and why.
    """
    for tracker in trackers:
        try:
            tracker.check()
        except TrackError as exc:
            raise TrackingError(f"{exc}. Start it or {fix}, then run again.") from None
