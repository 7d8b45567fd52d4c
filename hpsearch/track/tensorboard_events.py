"""TensorBoard: one run folder per trial, ``<logdir>/<trial_id>/`` (``docs/tracking.md``).

Each history row's numbers (:func:`~hpsearch.track.base.numeric_metrics`: the objective,
``epoch``, ``time_total_s``, the ``log_every`` training rows...) are scalars of the trial's
run, tagged by their column's name, at the row's ``step``. The HParams plugin's three
summaries go into the same folder, so TensorBoard's HParams tab lists every trial by its
parameters and its objectives' last values: the experiment (the parameters and the
objectives' metrics) and the session start (the trial's parameters) once the trial is
known, the session end once it has ended (``completed`` STATUS_SUCCESS; ``failed`` and
``unsupported_precision`` STATUS_FAILURE; ``stopped_by_asha``, ``stopped``, ``diverged``
STATUS_UNKNOWN), with the status and any error as the text tags ``hpsearch/status`` and
``hpsearch/error``. TensorBoard keeps a run's first session end, so a trial Tune runs again
after a failure keeps STATUS_FAILURE in the HParams tab; its curve goes on, and its new
status is one more ``hpsearch/status`` text.

What a folder holds is kept beside its event files, in ``hpsearch_sent.json``
(``{"rows": 12, "last_step": 718, "start": true, "end": "FINISHED", "status": "completed",
"error": false}``: the trial's history rows written, the last step of its reports (and of
its ``log_every`` rows, ``last_log_step``) they reach (:class:`~hpsearch.track.base.Steps`),
and which HParams summaries and texts are), replaced whole after the event writer flushed.
So a resumed sweep continues each trial's curve with no gap and no repeat, and a second
export into the same folder adds nothing. Nothing is ever deleted.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from hpsearch.store.reports import epoch_seconds
from hpsearch.track.base import (FAILED, FINISHED, SweepFacts, Tracker, TrackError,
                                 end_state, numeric_metrics, Steps)

__all__ = ["STATE_FILE", "TensorBoardTracker"]

#: The file in each trial's folder that says what the folder holds.
STATE_FILE = "hpsearch_sent.json"
#: Text tags of a trial's end.
STATUS_TAG, ERROR_TAG = "hpsearch/status", "hpsearch/error"
#: HParams session end status of each end state (KILLED: neither success nor failure).
_SESSION_STATUS = {FINISHED: "STATUS_SUCCESS", FAILED: "STATUS_FAILURE"}


class TensorBoardTracker(Tracker):
    """A sweep's trials as TensorBoard runs under ``logdir``.

    Args:
        logdir: The folder ``tensorboard --logdir`` is pointed at (created when the first
            trial is written).
    """

    def __init__(self, logdir: Path):
        self.logdir = Path(logdir)
        self.where = f"TensorBoard at {self.logdir}"
        self._facts: SweepFacts | None = None
        self._steps = Steps("training_iteration")
        self._writers: dict[str, Any] = {}  # trial id -> its open SummaryWriter
        self._state: dict[str, dict[str, Any]] = {}  # trial id -> its folder's state
        self._started_at: dict[str, float] = {}
        self._rows: dict[str, Mapping[str, Any]] = {}  # trial id -> its trial row
        self._dirty: set[str] = set()  # trials with events not yet in their state file
        self._ending: set[str] = set()  # trials whose writer closes at the next commit

    # --- the tracker's side of the record ------------------------------------------------

    def check(self) -> None:
        """Creates nothing: the nearest folder that exists must be one, and writable."""
        for path in (self.logdir, *self.logdir.parents):
            if not path.exists():
                continue
            if not path.is_dir():
                raise TrackError(f"cannot write TensorBoard events under {self.logdir}: "
                                 f"{path} is a file, not a folder")
            if not os.access(path, os.W_OK | os.X_OK):
                raise TrackError(f"cannot write TensorBoard events under {self.logdir}: "
                                 f"{path} is not writable")
            return

    def sync(self, facts: SweepFacts, trials: Sequence[Mapping[str, Any]],
             history: Sequence[Mapping[str, Any]]) -> None:
        self._facts = facts
        if self._steps.time_attr != facts.time_attr:
            self._steps = Steps(facts.time_attr)
        by_trial: dict[str, list[Mapping[str, Any]]] = {}
        for row in history:
            by_trial.setdefault(str(row.get("trial_id")), []).append(row)
        for row in trials:
            trial_id = str(row["trial_id"])
            with self._writing(trial_id):
                self._know(trial_id, row)
                self._session_start(trial_id)
                self._steps.learn(trial_id, by_trial.get(trial_id, []))
                self._steps.restore_count(  # a state file of an earlier hpsearch: a count
                    trial_id, self._state_of(trial_id)["rows"], by_trial.get(trial_id, []))
                self._write_rows(trial_id, by_trial.get(trial_id, []))  # what it lacks
                self._end(trial_id, row)

    def started(self, trial_id: str, row: Mapping[str, Any]) -> None:
        with self._writing(trial_id):
            self._know(trial_id, row)
            self._session_start(trial_id)

    def reported(self, trial_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        with self._writing(trial_id):
            self._session_start(trial_id)
            self._write_rows(trial_id, rows)

    def ended(self, trial_id: str, row: Mapping[str, Any]) -> None:
        with self._writing(trial_id):
            self._know(trial_id, row)
            self._session_start(trial_id)
            self._end(trial_id, row)

    def closed(self, status: str, facts: SweepFacts, best: Mapping[str, Any] | None,
               front: Sequence[Mapping[str, Any]]) -> None:
        self.release()

    def transient(self, error: BaseException) -> bool:
        """Any failure to write the files (a full disk, a folder taken away under an open
        writer): the writer is replaced, and the call made again passes once the disk
        takes it."""
        return isinstance(error, OSError)

    def release(self) -> None:
        for trial_id in list(self._dirty):
            try:
                self._commit(trial_id)
            except OSError:
                pass  # not counted: the next sync writes those rows again
        writers, self._writers = self._writers, {}
        for writer in writers.values():
            writer.close()

    # --- inside ----------------------------------------------------------------------------

    def _know(self, trial_id: str, row: Mapping[str, Any]) -> None:
        self._rows[trial_id] = row
        started = epoch_seconds(row.get("started_at"))
        if started:
            self._started_at[trial_id] = started

    def _state_path(self, trial_id: str) -> Path:
        return self.logdir / trial_id / STATE_FILE

    def _state_of(self, trial_id: str) -> dict[str, Any]:
        """What the trial's folder holds, read back from its state file the first time."""
        if trial_id not in self._state:
            state = {"rows": 0, "start": False, "end": None, "status": None, "error": False}
            path = self._state_path(trial_id)
            try:
                state.update(json.loads(path.read_text()))
            except FileNotFoundError:
                pass
            except (ValueError, UnicodeDecodeError) as exc:
                raise TrackError(f"{path} is not hpsearch's JSON ({exc}); move it away to "
                                 "write the trial again") from None
            self._state[trial_id] = state
            self._steps.restore(trial_id, state)
        return self._state[trial_id]

    @contextmanager
    def _writing(self, trial_id: str) -> Iterator[None]:
        """Commits what the block wrote. When it or the commit fails (a full disk kills
        the writer's thread), the trial's writer is let go and its state read back from
        its file, so the call made again writes into a new event file, counted from what
        was last committed (rows flushed before the failure may then be written twice)."""
        try:
            yield
            self._commit(trial_id)
        except BaseException:
            writer = self._writers.pop(trial_id, None)
            if writer is not None:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001 - it is broken already
                    pass
            self._state.pop(trial_id, None)
            self._dirty.discard(trial_id)
            self._ending.discard(trial_id)
            raise

    def _commit(self, trial_id: str) -> None:
        """Flushes the trial's events, then says so in its state file (replaced whole);
        closes the writer of a trial that has just ended (it writes nothing more unless it
        runs again). Writes nothing when nothing was written."""
        writer = self._writers.get(trial_id)
        if trial_id in self._dirty:
            if writer is not None:
                writer.flush()
            path = self._state_path(trial_id)
            temp = path.with_name(f".{STATE_FILE}.tmp-{os.getpid()}")
            temp.write_text(json.dumps(self._state_of(trial_id)))
            os.replace(temp, path)
            self._dirty.discard(trial_id)
        if trial_id in self._ending:
            self._ending.discard(trial_id)
            if writer is not None:
                del self._writers[trial_id]
                writer.close()

    def _writer(self, trial_id: str) -> Any:
        if trial_id not in self._writers:
            from torch.utils.tensorboard import SummaryWriter

            self._writers[trial_id] = SummaryWriter(log_dir=str(self.logdir / trial_id),
                                                    max_queue=1000, flush_secs=3600)
        return self._writers[trial_id]

    def _write_rows(self, trial_id: str, rows: Sequence[Mapping[str, Any]]) -> None:
        state = self._state_of(trial_id)  # the marks of what the folder holds, first
        placed = self._steps.due(trial_id, rows)
        if not placed:
            return
        writer = self._writer(trial_id)
        start = self._started_at.get(trial_id)
        for step, row in placed:
            total = row.get("time_total_s")
            timed = isinstance(total, (int, float)) and math.isfinite(total)
            at = start + total if start and timed else None  # None: now
            for tag, value in numeric_metrics(row).items():
                writer.add_scalar(tag, value, step, walltime=at)
        self._steps.sent(trial_id, placed)
        state.update(self._steps.marks(trial_id), rows=state["rows"] + len(placed))
        self.rows_sent += len(placed)
        self._dirty.add(trial_id)

    def _session_start(self, trial_id: str) -> None:
        """Writes the HParams experiment and session start, once, when the trial's
        parameters are known."""
        state, row, facts = self._state_of(trial_id), self._rows.get(trial_id), self._facts
        if state["start"] or row is None or facts is None:
            return
        from torch.utils.tensorboard.summary import hparams

        params = {name: _hparam(row.get(name)) for name in facts.params}
        params = {k: v for k, v in params.items() if v is not None}
        experiment, start, _ = hparams(params, {metric: None for metric, _ in facts.objectives})
        started = self._started_at.get(trial_id)
        if started:
            start = _edited(start, lambda data: setattr(data.session_start_info,
                                                        "start_time_secs", started))
        writer = self._writer(trial_id).file_writer
        writer.add_summary(experiment, walltime=started)
        writer.add_summary(start, walltime=started)
        state["start"] = True
        self._dirty.add(trial_id)

    def _end(self, trial_id: str, row: Mapping[str, Any]) -> None:
        """Writes the trial's end: the session end once (TensorBoard keeps the first), its
        status as text each time it changes, its error once the row has one."""
        run_state = end_state(row.get("status"))
        if run_state is None:
            return
        state = self._state_of(trial_id)
        ended = epoch_seconds(row.get("ended_at"))
        self._ending.add(trial_id)
        if state["end"] is None:
            from tensorboard.plugins.hparams.api_pb2 import Status
            from torch.utils.tensorboard.summary import hparams

            status = Status.Value(_SESSION_STATUS.get(run_state, "STATUS_UNKNOWN"))
            end = _edited(hparams({}, {})[2],
                          lambda data: _set_end(data.session_end_info, status, ended))
            self._writer(trial_id).file_writer.add_summary(end, walltime=ended)
            state["end"] = run_state
            self._dirty.add(trial_id)
        if state["status"] != row.get("status"):  # again if a trial run again ends otherwise
            self._writer(trial_id).add_text(STATUS_TAG, str(row.get("status")), walltime=ended)
            state["status"] = row.get("status")
            self._dirty.add(trial_id)
        if row.get("error") and not state["error"]:
            self._writer(trial_id).add_text(ERROR_TAG, str(row["error"])[:5000], walltime=ended)
            state["error"] = True
            self._dirty.add(trial_id)


def _hparam(value: Any) -> bool | int | float | str | None:
    """A parameter's value as the HParams plugin takes it (numbers, text, booleans)."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()  # numpy scalars from a table read back
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and value != value:
        return None  # a conditional parameter this trial has not
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _edited(summary: Any, edit: Any) -> Any:
    """``summary`` (one of :func:`hparams`'s) with its plugin data changed by ``edit``."""
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    plugin = summary.value[0].metadata.plugin_data
    data = HParamsPluginData.FromString(plugin.content)
    edit(data)
    plugin.content = data.SerializeToString()
    return summary


def _set_end(info: Any, status: int, ended: float | None) -> None:
    info.status = status
    if ended:
        info.end_time_secs = ended
