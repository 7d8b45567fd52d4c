"""Reports from files a script writes as it trains, and from ``hpsearch.report``.

``trainable.metrics_from`` names files under the trial's folder (``{trial_dir}``); each is
read as it grows, while the command runs, by :class:`FileSource`:

===============  ===========================================================================
jsonl            one JSON object per line (``metrics.jsonl``; what ``hpsearch.report`` writes)
csv              a header and rows; a rewrite with a wider header is fine
lightning        Lightning's ``CSVLogger`` ``metrics.csv``: a csv whose ``epoch`` and
                 ``step`` are 0-based indexes (the first validation is at epoch 0, step
                 22 after 23 batches), made counts of epochs and steps done (+1), as
                 ``max_t`` counts them. Lightning rewrites the file with a wider header
                 when a new metric appears, and writes it every ``flush_logs_every_n_steps``
                 (100) steps: set it lower for reports while the trial runs.
trainer_state    the HF Trainer's ``trainer_state.json`` (its ``log_history``; the newest
                 ``checkpoint-*/trainer_state.json`` with a glob)
tensorboard      a folder of TensorBoard event files: one row per step, its scalar tags
===============  ===========================================================================

A path may be a glob: the newest match counts (:func:`newest_match`). A row's ``step`` (or
``epoch``) column is the report's time; rows are made into reports by the same rules as
output lines (:class:`~hpsearch.command.metrics.OutputReader`). Rows already in a file when
the command starts are an earlier attempt's, reported then, and are skipped.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Collection

from hpsearch.command.metrics import OutputReader, numeric
from hpsearch.errors import TrainableError

__all__ = ["FORMATS", "FileSource", "MetricsFile", "TrialMetrics", "format_of", "newest_match"]

FORMATS = ("jsonl", "csv", "lightning", "trainer_state", "tensorboard")
_NUMBER = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class MetricsFile:
    """One ``metrics_from`` entry: a path under ``{trial_dir}`` (a glob is allowed) and
    its format."""

    path: str
    format: str


def format_of(path: str) -> str | None:
    """The format a path's name implies, or ``None`` (then ``format:`` must say)."""
    name = os.path.basename(path.rstrip("/"))
    if name == "trainer_state.json":
        return "trainer_state"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    return None


def newest_match(root: str, pattern: str, *, skip: Collection[str] = ()) -> str | None:
    """The newest path under ``root`` that ``pattern`` matches, leaving out those in
    ``skip``: by the last number in its name (``checkpoint-40`` before
    ``checkpoint-120``), then by modification time.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> for n in (5, 40, 120): os.mkdir(os.path.join(d, f"checkpoint-{n}"))
    >>> os.path.basename(newest_match(d, "checkpoint-*"))
    'checkpoint-120'
    """
    found = [p for p in glob.glob(os.path.join(glob.escape(root), pattern)) if p not in skip]
    if not found:
        return None

    def key(path: str) -> tuple[int, float]:
        match = _NUMBER.search(os.path.basename(path.rstrip("/")))
        try:
            mtime = os.path.getmtime(path)
        except OSError:
            mtime = 0.0
        return (int(match.group(1)) if match else -1, mtime)

    return max(found, key=key)


def _numbers(row: dict) -> dict[str, Any]:
    values = {str(k): numeric(v) for k, v in row.items() if v not in (None, "")}
    return {k: v for k, v in values.items() if v is not None}


def _complete_lines(text: str) -> list[str]:
    """The lines a writer has finished (the last one may be half written)."""
    return text.split("\n")[:-1]


def _rows_jsonl(text: str) -> list[dict]:
    rows = []
    for line in _complete_lines(text):
        line = line.strip()
        if not line:
            continue
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            rows.append(_numbers(found))
    return rows


def _rows_csv(text: str) -> list[dict]:
    lines = _complete_lines(text)
    if len(lines) < 2:
        return []
    return [_numbers(row) for row in csv.DictReader(io.StringIO("\n".join(lines) + "\n"))]


def _rows_lightning(text: str) -> list[dict]:
    rows = _rows_csv(text)
    for row in rows:
        for key in ("epoch", "step"):
            if isinstance(row.get(key), int):
                row[key] += 1
    return rows


def _rows_trainer_state(text: str) -> list[dict] | None:
    try:
        state = json.loads(text)
    except ValueError:
        return None  # being written: read it next time
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        return []
    return [_numbers(row) for row in history if isinstance(row, dict)]


class _Events:
    """A TensorBoard event folder's scalars, one row per step (tensorboard's own loader,
    which reads each file on from where it stopped)."""

    def __init__(self) -> None:
        self._loaders: dict[str, Any] = {}
        self.rows: dict[int, dict[str, Any]] = {}

    def read(self, folder: str) -> list[dict]:
        try:
            from tensorboard.backend.event_processing.event_file_loader import (
                EventFileLoader,
            )
        except ImportError:
            raise TrainableError("trainable.metrics_from: reading TensorBoard events needs "
                                 "the `tensorboard` package (pip install tensorboard)") from None
        for path in sorted(glob.glob(os.path.join(glob.escape(folder), "**",
                                                  "*tfevents*"), recursive=True)):
            loader = self._loaders.setdefault(path, EventFileLoader(path))
            for event in loader.Load():
                for value in event.summary.value:
                    number = _scalar(value)
                    if number is not None:
                        self.rows.setdefault(int(event.step), {"step": int(event.step)})[
                            value.tag] = number
        return [self.rows[step] for step in sorted(self.rows)]


def _scalar(value: Any) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor") and value.tensor.float_val:
        return float(value.tensor.float_val[0])
    if value.HasField("tensor") and value.tensor.double_val:
        return float(value.tensor.double_val[0])
    if value.HasField("tensor") and value.tensor.tensor_content and value.tensor.dtype == 1:
        import struct

        return struct.unpack("<f", value.tensor.tensor_content[:4])[0]
    return None


class FileSource:
    """One file (or event folder) read as it grows into reports (module docstring).

    Args:
        root: The trial's folder: ``spec.path`` is relative to it.
        reader: Makes rows into reports (its own, not the output's).
    """

    def __init__(self, root: str, spec: MetricsFile, reader: OutputReader):
        self._root, self._spec, self.reader = root, spec, reader
        self._stamp: tuple | None = None
        self._events = _Events() if spec.format == "tensorboard" else None
        self._seen = len(self._rows() or [])  # rows already there: an earlier attempt's

    @property
    def where(self) -> str:
        return os.path.join(self._root, self._spec.path)

    def _rows(self) -> list[dict] | None:
        path = newest_match(self._root, self._spec.path)
        if path is None:
            return []
        if self._events is not None:
            return self._events.read(path)
        try:
            stat = os.stat(path)
            stamp = (path, stat.st_size, stat.st_mtime_ns)
            if stamp == self._stamp:
                return None  # unchanged
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return None
        rows = {"jsonl": _rows_jsonl, "csv": _rows_csv, "lightning": _rows_lightning,
                "trainer_state": _rows_trainer_state}[self._spec.format](text)
        if rows is not None:
            self._stamp = stamp
        return rows

    def poll(self) -> list[dict[str, Any]]:
        """The reports the rows written since the last poll complete."""
        rows = self._rows()
        if rows is None:
            return []
        if len(rows) < self._seen:  # the file was started again (a new run of the script)
            self._seen = 0
        new, self._seen = rows[self._seen:], len(rows)
        out: list[dict[str, Any]] = []
        for row in new:
            out += self.reader.take(dict(row), from_dict=False)
        return out


def sources_for(root: str, files: tuple[MetricsFile, ...], push_file: str | None,
                make_reader: Callable[[], OutputReader]) -> list[FileSource]:
    """The sources of one trial: its ``metrics_from`` files, then the push file."""
    out = [FileSource(root, f, make_reader()) for f in files]
    if push_file is not None:
        folder, name = os.path.split(push_file)
        out.append(FileSource(folder, MetricsFile(name, "jsonl"), make_reader()))
    return out


class TrialMetrics:
    """Every place one trial's reports come from, read in the thread that runs its command:
    its output (unless ``metrics_from`` names files), its ``metrics_from`` files, and what
    the script pushes with ``hpsearch.report``. Once a pushed report has come, the output
    is no longer read for reports (the script says itself what it reports).

    ``reports``, ``seen`` and ``time_from`` sum up every source, for the errors of a trial
    that never reported.
    """

    def __init__(self, *, patterns: tuple[str, ...], objective: str, time_key: str | None,
                 trial_dir: str, files: tuple[MetricsFile, ...], push_file: str | None,
                 report: Callable[[dict[str, Any]], None], poll_s: float = 0.5,
                 clock: Callable[[], float] | None = None):
        import time

        def reader() -> OutputReader:
            return OutputReader((), objective=objective, time_key=time_key)

        self.output = OutputReader(patterns, objective=objective, time_key=time_key)
        self._read_output = not files
        self._sources = sources_for(trial_dir, files, push_file, reader)
        self._push = self._sources[-1] if push_file is not None else None
        self._report = report
        self._poll_s = poll_s
        self._clock = clock or time.monotonic
        self._next = 0.0

    def _readers(self) -> list[OutputReader]:
        return [self.output] + [s.reader for s in self._sources]

    @property
    def reports(self) -> int:
        return sum(r.reports for r in self._readers())

    @property
    def seen(self) -> set[str]:
        return set().union(*(r.seen for r in self._readers()))

    @property
    def time_from(self) -> set[str]:
        return set().union(*(r.time_from for r in self._readers()))

    def _send(self, found: list[dict[str, Any]]) -> None:
        for metrics in found:
            self._report(metrics)

    def on_line(self, line: str) -> None:
        """One line of the command's output (``run_command``'s callback)."""
        self.poll()  # first: a push that came before this line turns the output off
        if self._read_output and not (self._push and self._push.reader.reports):
            self._send(self.output.feed(line))

    def poll(self, *, now: bool = False) -> bool:
        """Read the files when ``poll_s`` has passed since the last read (always with
        ``now``). Returns ``False``: it serves as ``run_command``'s ``should_stop``."""
        t = self._clock()
        if not now and t < self._next:
            return False
        self._next = t + self._poll_s
        if self._read_output:
            self._send(self.output.tick())
        for source in self._sources:
            self._send(source.poll())
        return False

    def finish(self) -> None:
        """The command has ended: what is left in the output and the files."""
        if self._read_output:
            self._send(self.output.finish())
        self.poll(now=True)
