"""Trial tables: :class:`TrialRecords` -> ``trials.parquet`` and ``history.parquet``.

The Tune callback writes both tables atomically and durably at a bounded interval and
when trials end (at once, unless writing would take more than 2% of the driver's time:
:class:`hpsearch.driver.callbacks.TablesCallback`), so a notebook can read them at any
moment of a sweep. Readers (:func:`read_trials`,
:func:`read_history`) import only pandas and pyarrow. The schema and the layout are in
``docs/trial-tables.md``.

What a write costs:

* ``trials.parquet`` is one file, converted and replaced whole (atomic rename): one row
  per trial. The first write converts it through pandas; later ones build the same Arrow
  table column by column (:class:`TablesWriter`): on a busy 2-core machine, flushes to
  disk included, 7 ms per write at 300 trials and 16 ms at 2,000, against 21 and 57 ms
  through pandas.
* ``history.parquet``, the table that grows (reports x trials), is a directory of parts
  (:mod:`hpsearch.store.parts`): a write converts and appends only the reports that
  arrived since the previous one.

A :class:`TablesWriter` holds what is on disk; :func:`write_tables` keeps one per records
and directory, so every caller of it (the Tune callback, the driver's last write) shares
it.
"""

from __future__ import annotations

import math
import os
import weakref
from pathlib import Path
from typing import Any, Iterable, Mapping

from hpsearch.errors import DamagedSweepError, SweepNotFoundError
from hpsearch.space.spec import TRIAL_COLUMNS, Spec
from hpsearch.store.layout import SweepDir, UnsafePathError, check_trial_id, write_atomic
from hpsearch.store.parts import (
    HistoryWriter,
    PartsOverlap,
    conform,
    cover,
    read_dataset,
    unified_schema,
)
from hpsearch.store.records import TrialRecords

__all__ = ["TablesWriter", "history_frame", "load_tables", "prepare_single_trial_dir",
           "python_value", "read_history", "read_trials", "tables_writer", "trials_frame",
           "write_single_trial", "write_tables"]


def trials_frame(records: TrialRecords):
    """The trial table of ``records`` as a DataFrame with stable column types."""
    import pandas as pd

    spec = records.spec
    res = spec.resources
    params = [p.name for p in spec.params if p.name not in TRIAL_COLUMNS]
    columns = ["trial_id", "status", *params, *TRIAL_COLUMNS[2:]]
    rows = list(records.trials.values())
    # Built column by column (one list per column, not one dict per row): the whole table
    # is converted at every write, ~10 ms per 1,000 trials.
    data = {c: [row.get(c) for row in rows] for c in columns}
    walls = data["wall_s"]
    per_worker, per_gpu = res.workers, res.per_trial().get("GPU", 0.0)
    data["worker_s"] = [None if w is None else w * per_worker for w in walls]
    data["gpu_s"] = [None if w is None else w * per_gpu for w in walls]
    df = pd.DataFrame(data, columns=columns)
    for col in ("started_at", "ended_at"):
        # Always nanoseconds: pandas picks the unit from the values (seconds for a column
        # of None, microseconds for times read back from Parquet on a resume).
        df[col] = pd.to_datetime(df[col], unit="s", utc=True).dt.as_unit("ns")
    for col in ("final_value", "best_value", "wall_s", "worker_s", "gpu_s", "startup_s"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    for col in ("best_step", "steps", "optuna_trial"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in ("best_epoch", "epochs"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    # Fixed types, so a column that is empty in this sweep (no error yet, a conditional
    # parameter never sampled) has the same Arrow type as in every other sweep.
    for col in ("trial_id", "status", "precision_used", "checkpoint", "error"):
        df[col] = df[col].astype("string")
    for p in spec.params:
        if p.name not in params:
            continue
        if p.type == "float":
            df[p.name] = pd.to_numeric(df[p.name], errors="coerce").astype("float64")
        elif p.type == "int":
            df[p.name] = pd.to_numeric(df[p.name], errors="coerce").astype("Int64")
        elif all(isinstance(c, str) for c in p.choices):
            df[p.name] = df[p.name].astype("string")
    return _arrow_safe(df)[0]


def history_frame(records: TrialRecords):
    """The history table of ``records`` as a DataFrame."""
    return _history_df(records.history)[0]


def _history_df(rows: list[Mapping[str, Any]]):
    """History rows as a DataFrame, and the columns stored as strings."""
    import pandas as pd

    df = pd.DataFrame(rows)
    if df.empty:
        df = pd.DataFrame(columns=["trial_id", "step", "epoch", "time_total_s"])
    lead = [c for c in ("trial_id", "step", "epoch", "time_total_s") if c in df]
    df = df[lead + sorted(c for c in df.columns if c not in lead)]
    if "step" in df:
        df["step"] = pd.to_numeric(df["step"], errors="coerce").astype("Int64")
    if "epoch" in df:
        df["epoch"] = pd.to_numeric(df["epoch"], errors="coerce").astype("float64")
    return _arrow_safe(df)


def _is_nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _arrow_safe(df):
    """Columns mixing types (e.g. categorical choices ``[32, auto]``) become strings, so
    the Parquet schema stays one type per column. Returns the frame and those columns."""
    strings = set()
    for col in df.columns:
        if df[col].dtype == object:
            kinds = {type(v) for v in df[col] if not _is_nan(v)}
            if len(kinds) > 1:
                df[col] = df[col].map(lambda v: None if _is_nan(v) else str(v))
                strings.add(col)
    return df, strings


# --- writing -----------------------------------------------------------------------------


def write_parquet_atomic(df, path: Path) -> None:
    """Write ``df`` so a reader sees the old file or the new one, even after a power cut."""
    write_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


# The trial table's columns by type, as trials_frame makes them.
_FLOAT_COLUMNS = ("final_value", "best_value", "wall_s", "worker_s", "gpu_s", "startup_s",
                  "best_epoch", "epochs")
_INT_COLUMNS = ("best_step", "steps", "optuna_trial")
_STRING_COLUMNS = ("trial_id", "status", "precision_used", "checkpoint", "error")
_TIME_COLUMNS = ("started_at", "ended_at")


def _typed_columns(spec: Spec) -> dict[str, str] | None:
    """Every trial-table column with the kind :func:`trials_frame` gives it, or ``None``
    when a parameter's column type depends on its values (choices that are not all
    strings): only then does the table need pandas' inference at each write."""
    kinds = {c: k for k, cols in (("float", _FLOAT_COLUMNS), ("int", _INT_COLUMNS),
                                  ("string", _STRING_COLUMNS), ("time", _TIME_COLUMNS))
             for c in cols}
    for p in spec.params:
        if p.name in TRIAL_COLUMNS:
            continue
        if p.type in ("float", "int"):
            kinds[p.name] = p.type
        elif all(isinstance(c, str) for c in p.choices):
            kinds[p.name] = "string"
        else:
            return None
    return kinds


def _fits(kind: str, value: Any) -> bool:
    """Whether ``value`` goes into a column of ``kind`` as :func:`trials_frame` would put
    it there; where not, the write goes through pandas, which decides."""
    if value is None:
        return True
    if kind == "string":
        return isinstance(value, str)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return kind != "int" or not isinstance(value, float) or value != value or value.is_integer()


class _TrialColumns:
    """The trial table as one Python list per column, kept up to date from the rows that
    changed since the last write (:meth:`TrialRecords.changed_since`). A write then costs
    the changed cells plus one C conversion per column (``pa.array``), instead of reading
    every cell of every row in Python: ~18 -> ~3 ms per write at 2,000 trials. Times are
    converted when they change, by the pandas call :func:`trials_frame` makes.
    Anything else (rows removed or reloaded, a value its column does not hold) starts
    again from the rows."""

    def __init__(self, schema, kinds: Mapping[str, str], spec: Spec):
        res = spec.resources
        self.schema, self.kinds = schema, kinds
        self.scale = {"worker_s": res.workers, "gpu_s": res.per_trial().get("GPU", 0.0)}
        self._reset()

    def _reset(self) -> None:
        self.rows: dict[str, int] = {}  # trial_id -> index in the columns
        self.columns: dict[str, list] = {f.name: [] for f in self.schema}
        self.version: int | None = None
        self.rewrites: int | None = None

    def table(self, records: TrialRecords):
        """The Arrow trial table of ``records``, or ``None`` where pandas must decide."""
        import pandas as pd
        import pyarrow as pa

        if self.rewrites != records.rewrites:
            self._reset()
        # From scratch: every row in table order (rows a resume loaded were never touched).
        changed = list(records.trials) if self.version is None else \
            records.changed_since(self.version)
        times: dict[str, tuple[list[int], list[Any]]] = {
            name: ([], []) for name, kind in self.kinds.items() if kind == "time"}
        for tid in changed:
            row = records.trials[tid]
            i = self.rows.get(tid)
            if i is None:
                i = self.rows[tid] = len(self.rows)
                for column in self.columns.values():
                    column.append(None)
            for name, column in self.columns.items():
                kind = self.kinds[name]
                if name in self.scale:
                    wall = row.get("wall_s")
                    value = None if wall is None else wall * self.scale[name]
                else:
                    value = row.get(name)
                if kind == "time":
                    times[name][0].append(i)
                    times[name][1].append(value)
                elif not _fits(kind, value):
                    self._reset()
                    return None
                else:
                    column[i] = value
        try:
            for name, (at, values) in times.items():
                if values:
                    converted = pd.to_datetime(values, unit="s", utc=True).as_unit("ns")
                    for i, ns, missing in zip(at, converted.asi8, converted.isna()):
                        self.columns[name][i] = None if missing else int(ns)
        except (TypeError, ValueError, OverflowError):
            self._reset()
            return None
        self.version, self.rewrites = records.version, records.rewrites
        if len(self.rows) != len(records.trials) or (
                records.trials and self.rows.get(next(reversed(records.trials))) != len(self.rows) - 1):
            self._reset()  # not the table's row order: never expected, but cheap to check
            return None
        arrays = []
        try:
            for field in self.schema:
                values = self.columns[field.name]
                if self.kinds[field.name] == "time":  # nanoseconds, as trials_frame makes them
                    arrays.append(pa.array(values, type=pa.int64()).cast(field.type))
                else:
                    arrays.append(pa.array(values, type=field.type, from_pandas=True))
        except (TypeError, ValueError, OverflowError, pa.ArrowException):
            self._reset()
            return None
        return pa.Table.from_arrays(arrays, schema=self.schema)


class TablesWriter:
    """Both tables of one sweep directory, written from one records (trials first).

    The trial table is replaced whole at each write. The first write converts it through
    pandas (:func:`trials_frame`); later ones build the same Arrow table in that write's
    schema from the cells that changed (:class:`_TrialColumns`) when the spec fixes every
    column's type."""

    def __init__(self, sweep: SweepDir):
        self.sweep = sweep
        self.history = HistoryWriter(sweep)
        self._columns: _TrialColumns | None = None

    def write(self, records: TrialRecords) -> None:
        self.write_trials(records)
        self.history.write(records, _history_df)

    def write_trials(self, records: TrialRecords) -> None:
        """Replace ``trials.parquet`` with ``records``' trial table."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = self._columns.table(records) if self._columns is not None else None
        if table is None:
            table = pa.Table.from_pandas(trials_frame(records), preserve_index=False)
            kinds = _typed_columns(records.spec)
            times_ns = all(table.schema.field(c).type == pa.timestamp("ns", tz="UTC")
                           for c in _TIME_COLUMNS)
            if self._columns is None and kinds is not None and times_ns and \
                    set(table.schema.names) <= set(kinds):
                self._columns = _TrialColumns(table.schema, kinds, records.spec)
        write_atomic(self.sweep.trials,
                     lambda tmp: pq.write_table(table, tmp, compression="snappy"))


# One writer per records and directory: it knows what is on disk. Weak, so records that
# are gone take their writers with them.
_WRITERS: "weakref.WeakKeyDictionary[TrialRecords, dict[Path, TablesWriter]]" = \
    weakref.WeakKeyDictionary()


def tables_writer(records: TrialRecords, sweep: SweepDir) -> TablesWriter:
    """The writer of ``records`` into ``sweep`` (made on first use)."""
    mine = _WRITERS.setdefault(records, {})
    writer = mine.get(sweep.path)
    if writer is None:
        writer = mine[sweep.path] = TablesWriter(sweep)
    return writer


def write_tables(records: TrialRecords, sweep: SweepDir) -> None:
    """Bring ``sweep``'s tables up to date with ``records``: replace ``trials.parquet``,
    and append the reports that arrived since the last call to the history.

    The first call for a records and directory writes both tables whole (and turns a
    single-file history into a dataset of parts).

    Raises:
        StorageError: A file could not be written; what is on disk is whole, and the next
            call writes what this one could not.
    """
    tables_writer(records, sweep).write(records)
    _kill_after_writes()


# Set only by the fault tests (tests/cli/test_study_fidelity.py): SIGKILL the driver right
# after its N-th complete write of both tables, a moment when the tables hold every report.
_KILL_AFTER_WRITES = int(os.environ.get("HPSEARCH_TEST_KILL_AFTER_TABLE_WRITES", "0") or 0)
_writes = [0]


def _kill_after_writes() -> None:
    if _KILL_AFTER_WRITES:
        _writes[0] += 1
        if _writes[0] >= _KILL_AFTER_WRITES:
            os.kill(os.getpid(), 9)


# --- reading -----------------------------------------------------------------------------


def _table_path(path: str | os.PathLike, which: str) -> Path:
    path = Path(path)
    if path.is_dir() and not (which == "history" and SweepDir.is_history_dataset(path)):
        path = getattr(SweepDir.of(path), which)
    if not path.exists():
        raise SweepNotFoundError(
            f"no {which} table at {path}: pass a sweep directory (e.g. runs/<name>) "
            "or the path of the table itself"
        )
    return path


def _read_parquet(path: Path):
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure means a damaged file
        raise DamagedSweepError(
            f"{path} cannot be read as a table ({type(exc).__name__}: {_short(exc)})"
        ) from None


def read_trials(path: str | os.PathLike):
    """Read a sweep's trial table (one row per trial) as a pandas DataFrame.

    Args:
        path: The sweep directory (``runs/<name>``) or the ``trials.parquet`` file. Safe to
            call while the sweep runs.

    Raises:
        SweepNotFoundError: There is no trial table there.
        DamagedSweepError: The file is not a readable table.

    Example:
        >>> import hpsearch
        >>> df = hpsearch.read_trials("runs/quickstart")          # doctest: +SKIP
        >>> df.sort_values("best_value").head()                   # doctest: +SKIP
    """
    return _read_parquet(_table_path(path, "trials"))


def read_history(path: str | os.PathLike):
    """Read a sweep's history table (one row per report per trial) as a DataFrame.

    Args:
        path: The sweep directory, or ``history.parquet`` itself: a directory of parts, or
            the single file of a sweep written before layout 3. Safe to call while the
            sweep runs: parts a writer merges meanwhile are read again.

    Raises:
        SweepNotFoundError: There is no history table there.
        DamagedSweepError: A part or the file is not a readable table.
    """
    path = _table_path(path, "history")
    if path.is_dir():
        table = read_dataset(path)
        return _empty_history() if table is None else table.to_pandas()
    return _read_parquet(path)


def _empty_history():
    import pandas as pd

    return pd.DataFrame(columns=["trial_id", "step", "epoch", "time_total_s"])


def _valid_trials(df, path: Path):
    missing = {"trial_id", "status"} - set(df.columns)
    if missing:
        raise DamagedSweepError(f"{path} has no {', '.join(sorted(missing))} column")
    try:
        for tid in df["trial_id"]:
            check_trial_id(tid)
    except UnsafePathError as exc:
        raise DamagedSweepError(f"{path}: {exc}") from None
    return df


def _newest_readable(sweep: SweepDir, target: Path, check=None):
    """The newest complete copy of ``target``: the file itself, or a temporary copy a killed
    writer finished but never renamed. Returns ``(frame, path)``; ``(None, None)`` when
    neither exists."""
    candidates = [p for p in (target, *sweep.temp_files(target)) if p.is_file()]
    candidates.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    errors = []
    for path in candidates:
        try:
            df = _read_parquet(path)
            return (check(df, path) if check else df), path
        except DamagedSweepError as exc:
            errors.append(str(exc))
    if errors:
        raise DamagedSweepError(
            f"{target.name} of sweep {sweep.name!r} is damaged and no complete copy is left: "
            f"{errors[0]}. Nothing was changed."
        )
    return None, None


def _load_dataset(sweep: SweepDir, dataset: Path):
    """A history dataset for a resume: its parts, and the complete parts a killed writer
    wrote but never renamed (those are renamed into place afterwards). Returns
    ``(frame, finish)``; ``finish()`` renames and removes the temporary parts."""
    import pyarrow.parquet as pq

    published = SweepDir.history_parts(dataset)
    temporary = SweepDir.history_parts(dataset, temporary=True)
    readable, damaged = {}, []
    for first, end, path in published + temporary:
        try:
            readable[path] = pq.read_table(path)
        except Exception:  # noqa: BLE001 - a part that cannot be read is no part
            if path not in {p for _, _, p in temporary}:
                damaged.append((first, end, path))
    temp_paths = {p for _, _, p in temporary}
    # A published part and a temporary copy of the same rows: the published one.
    candidates = sorted(((f, e, p) for f, e, p in published + temporary if p in readable),
                        key=lambda x: x[2] in temp_paths)
    try:
        chosen = cover(candidates)
    except PartsOverlap as exc:
        raise DamagedSweepError(f"{dataset.name} of sweep {sweep.name!r} has overlapping "
                                f"parts ({exc}). Nothing was changed.") from None
    spans = [(f, e) for f, e, _ in chosen]
    for first, end, path in damaged:
        if end > first and not any(f <= first and end <= e for f, e in spans):
            raise DamagedSweepError(
                f"{dataset.name} of sweep {sweep.name!r} is damaged: {path.name} cannot be "
                "read and no complete copy of its rows is left. Nothing was changed.")
    schema_part = next((p for f, e, p in published if f == e == 0 and p in readable), None)
    import pyarrow as pa

    schema = unified_schema(readable[schema_part].schema if schema_part else None,
                            [readable[p].schema for _, _, p in chosen])
    if schema is not None:
        table = pa.concat_tables([conform(readable[p], schema) for _, _, p in chosen]) \
            if chosen else schema.empty_table()
        df = table.replace_schema_metadata(schema.metadata).to_pandas()
    else:
        df = _empty_history()

    def finish() -> None:
        for first, end, path in chosen:
            if path in temp_paths:
                os.replace(path, SweepDir.history_part(dataset, first, end))
        for _, _, path in SweepDir.history_parts(dataset, temporary=True):
            sweep.remove(path)

    return df, finish


def _load_history(sweep: SweepDir):
    """The history for a resume, in either layout: ``(frame or None, finish)``."""
    target = sweep.history
    if target.is_dir():
        df, finish = _load_dataset(sweep, target)
        leftovers = sweep.temp_dirs(target) + sweep.temp_files(target)
    elif not os.path.lexists(target) and sweep.temp_dirs(target):
        # A writer creating the dataset (or converting a single-file history, which it
        # deletes only once the directory is whole) was killed before renaming it.
        newest = sweep.temp_dirs(target)[0]
        df, finish_parts = _load_dataset(sweep, newest)

        def finish() -> None:
            finish_parts()
            os.replace(newest, target)

        leftovers = sweep.temp_dirs(target)[1:] + sweep.temp_files(target)
    else:  # the single file of layout 2 (or no history yet)
        df, _ = _newest_readable(sweep, target)
        finish = None
        leftovers = sweep.temp_dirs(target) + sweep.temp_files(target)

    def finish_all() -> None:
        if finish is not None:
            finish()
        for stale in leftovers:
            if os.path.lexists(stale):
                sweep.remove(stale)

    return df, finish_all


def load_tables(sweep: SweepDir) -> tuple[list[dict], list[dict]]:
    """The rows of both tables for a resume, read and checked before anything is changed.

    A damaged table is recovered from a complete temporary copy when one exists (for the
    history: complete parts a killed writer never renamed). Only once both are read are
    stale temporary files removed. Reads both layouts of the history.

    Raises:
        DamagedSweepError: A table is damaged with no complete copy, a trial id is not a
            trial id, or the history exists without the trial table.
    """
    trials, _ = _newest_readable(sweep, sweep.trials, _valid_trials)
    history, finish = _load_history(sweep)
    if trials is None and history is not None and len(history):
        raise DamagedSweepError(
            f"sweep {sweep.name!r} has a history table but no trial table ({sweep.trials}). "
            "Nothing was changed; restore trials.parquet from a backup, or copy "
            "history.parquet away and start a new sweep."
        )
    for stale in sweep.temp_files(sweep.trials):
        sweep.remove(stale)
    finish()
    if trials is None:
        return [], []
    trial_rows = trials.to_dict("records")
    history_rows = history.to_dict("records") if history is not None else []
    return trial_rows, history_rows


def prepare_single_trial_dir(path: str | os.PathLike, *, overwrite: bool = False) -> SweepDir:
    """The directory ``hpsearch trial --output`` writes its tables to, made and checked
    before training starts.

    Raises:
        InvalidArgumentError: ``path`` is not a place for tables (a file, ``/proc``).
        SweepExistsError: It holds a sweep or trial tables already, and ``overwrite`` is
            false. Nothing is written.
        StorageError: It cannot be created or written.
    """
    from hpsearch.errors import InvalidArgumentError, StorageError, SweepExistsError
    from hpsearch.space import storage_problem

    problem = storage_problem(os.fspath(path))
    if problem:
        raise InvalidArgumentError(f"--output {os.fspath(path)!r} {problem}")
    out = SweepDir.of(path)
    held = [p.name for p in (out.manifest, out.trials, out.history) if os.path.lexists(p)]
    if held and not overwrite:
        what = "a sweep" if out.manifest.name in held else "trial tables"
        raise SweepExistsError(
            f"--output {out} already holds {what} ({', '.join(held)}); hpsearch trial would "
            "replace its tables. Choose another directory, or pass --overwrite to replace "
            "the tables (nothing else there is touched)."
        )
    try:
        out.path.mkdir(parents=True, exist_ok=True)
        probe = SweepDir.temp_for(out.trials, "probe")
        probe.write_bytes(b"")
        out.remove(probe)
    except OSError as exc:
        raise StorageError(f"cannot write to --output {out}: {exc.strerror or exc}") from None
    return out


def write_single_trial(spec: Spec, params: Mapping[str, Any], reports: Iterable[Mapping[str, Any]],
                       sweep: SweepDir, *, trial_id: str = "trial") -> None:
    """Tables for one trial run without a sweep (``hpsearch trial --output``), with the
    same schema as a sweep's."""
    sweep.path.mkdir(parents=True, exist_ok=True)
    records = TrialRecords(spec)
    records.start(trial_id, params)
    for report in reports:
        records.result(trial_id, report)
    records.end(trial_id)
    write_tables(records, sweep)


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def python_value(value: Any) -> Any:
    """A table cell as a plain Python value: numpy scalars unwrapped, NaN/NA/NaT -> None."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, TypeError):
            pass
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
