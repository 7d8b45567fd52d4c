"""A sweep written into trackers after the fact, from its tables: :func:`export_sweep`.

The same :meth:`~hpsearch.track.base.Tracker.sync` a live sweep starts with does the work,
so an export continues whatever the tracker already holds of the sweep (a live run cut
off by a tracker that was down, an earlier export) and a second export adds nothing.
Nothing of the sweep is changed; Ray is not needed.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from hpsearch.errors import InvalidArgumentError, TrackingError
from hpsearch.space.spec import MlflowTrack, Spec, Track
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir, default_storage
from hpsearch.store.records import TrialRecords
from hpsearch.track import check_trackers, make_trackers
from hpsearch.track.base import TrackError
from hpsearch.track.pump import facts_of

__all__ = ["export_sweep"]


def export_sweep(name: str, *, storage: str | None = None, mlflow: str | bool | None = None,
                 experiment: str | None = None, tensorboard: str | None = None,
                 stream: Any = None) -> dict[str, int]:
    """Write sweep ``name`` into trackers from its tables: one run per trial (and one for
    the sweep) in MLflow, event files per trial for TensorBoard.

    Args:
        name: The sweep, under ``storage`` (``--storage`` > ``$HPSEARCH_STORAGE`` >
            ``./runs``).
        mlflow: ``True`` or a tracking URI: to MLflow (the URI defaults to the space's
            ``track.mlflow.tracking_uri``, then ``$MLFLOW_TRACKING_URI``).
        experiment: The MLflow experiment (default: the space's, else the sweep's name).
        tensorboard: A folder for TensorBoard event files (a folder per trial).
        stream: Where the summary line goes (default stdout).

    With neither ``mlflow`` nor ``tensorboard``, the trackers of the sweep's own ``track:``.

    Returns:
        The trials and history rows exported (each tracker got all of them).

    Raises:
        SweepNotFoundError: No sweep of that name.
        SweepExistsError: Its driver still runs (it writes to its trackers itself).
        TrackingError: No tracker asked for, or one cannot be reached or written.
    """
    from hpsearch.space import load_space
    from hpsearch.store import sweeps

    stream = stream or sys.stdout
    sweep = SweepDir.at(default_storage(storage), name)
    manifest = sweeps.open_existing(sweep)
    spec = load_space(sweep.space, resolve_trainable=False)
    track = _chosen(spec.track, mlflow=mlflow, experiment=experiment, tensorboard=tensorboard)
    trackers = make_trackers(track, sweep_name=sweep.name,
                             tensorboard=Path(tensorboard) if tensorboard else sweep.tensorboard)
    check_trackers(trackers, fix="name another (--mlflow URI, --tensorboard DIR)")
    rows = TrialRecords(spec)
    rows.load(*_table_rows(sweep))
    record = _Tables(spec, sweep, manifest, rows)
    facts = facts_of(record)
    trials = [{k: v for k, v in r.items() if k != "last"} for r in rows.trials.values()]
    status = manifest.get("status")
    if status == st.SWEEP_RUNNING:  # its driver died: its unfinished trials are paused
        status = st.SWEEP_INTERRUPTED
    best = record.best()
    front = [{k: v for k, v in r.items() if k != "last"} for r in record.front()]
    for tracker in trackers:
        try:
            tracker.sync(facts, trials, rows.history)
            tracker.closed(str(status), facts, best and {k: v for k, v in best.items()
                                                         if k != "last"}, front)
        except Exception as exc:  # noqa: BLE001 - the tracker's own error, as one line
            raise TrackingError(f"{tracker.where}: the export stopped part-way "
                                f"({_line(exc)}); run it again to send the rest") from None
        finally:
            tracker.release()
        print(f"exported sweep {sweep.name!r} to {tracker.where}: {len(trials)} trials, "
              f"{len(rows.history)} history rows ({tracker.rows_sent} new)", file=stream)
    return {"trials": len(trials), "history": len(rows.history)}


def _table_rows(sweep: SweepDir) -> tuple[list[dict], list[dict]]:
    """Both tables' rows, cells as Python values (none yet: no rows)."""
    from hpsearch.errors import SweepNotFoundError
    from hpsearch.store.tables import python_value, read_history, read_trials

    out = []
    for read in (read_trials, read_history):
        try:
            frame = read(sweep.path)
        except SweepNotFoundError:
            out.append([])
            continue
        out.append([{k: python_value(v) for k, v in r.items()}
                    for r in frame.to_dict("records")])
    return out[0], out[1]


class _Tables:
    """A finished sweep's tables, as :func:`facts_of` and the trackers read a record."""

    def __init__(self, spec: Spec, sweep: SweepDir, manifest: dict, rows: TrialRecords):
        self.spec, self.sweep, self.manifest, self.rows = spec, sweep, manifest, rows

    def best(self) -> dict[str, Any] | None:
        return self.rows.best()

    def front(self) -> list[dict[str, Any]]:
        return [r for r in self.rows.trials.values() if r.get("pareto")]


def _chosen(track: Track, *, mlflow: str | bool | None, experiment: str | None,
            tensorboard: str | None) -> Track:
    """The trackers an export writes to: those named, else the space's own."""
    if mlflow is None and tensorboard is None:
        if not track.any:
            raise InvalidArgumentError(
                "the sweep's space tracks nothing: name a tracker, e.g. `--mlflow "
                "http://HOST:5000` or `--tensorboard DIR`")
        return track
    own = track.mlflow or MlflowTrack()
    chosen = None
    if mlflow is not None and mlflow is not False:
        chosen = dataclasses.replace(
            own, tracking_uri=mlflow if isinstance(mlflow, str) and mlflow else own.tracking_uri,
            experiment=experiment or own.experiment)
    return Track(mlflow=chosen, tensorboard=tensorboard is not None)


def _line(error: BaseException) -> str:
    if isinstance(error, TrackError):
        return str(error)
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    return (lines[0] if lines else type(error).__name__)[:300]
