"""Both tables of a sweep directory kept up to date with a records: :class:`TablesWriter`.

The trial table is replaced whole at each write, built column by column from the cells
that changed when the spec fixes every column's type; the history appends the reports
that arrived since the previous write (:class:`hpsearch.store.parts.HistoryWriter`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from hpsearch.space.spec import TRIAL_COLUMNS, Spec
from hpsearch.store.layout import SweepDir, write_atomic
from hpsearch.store.parts import HistoryWriter
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables.frames import (
    flag_columns,
    objective_columns,
    _FLOAT_COLUMNS,
    _INT_COLUMNS,
    _STRING_COLUMNS,
    _TIME_COLUMNS,
    _history_df,
    trials_frame,
)

__all__ = ["TablesWriter", "write_parquet_atomic", "write_tables"]


def write_parquet_atomic(df, path: Path) -> None:
    """Write ``df`` so a reader sees the old file or the new one, even after a power cut."""
    write_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


def _typed_columns(spec: Spec) -> dict[str, str] | None:
    """Every trial-table column with the kind :func:`trials_frame` gives it, or ``None``
    when a parameter's column type depends on its values (choices that are not all
    strings): only then does the table need pandas' inference at each write."""
    kinds = {c: k for k, cols in (("float", _FLOAT_COLUMNS), ("int", _INT_COLUMNS),
                                  ("string", _STRING_COLUMNS), ("time", _TIME_COLUMNS))
             for c in cols}
    kinds.update({c: "float" for c in objective_columns(spec)})
    kinds.update({c: "bool" for c in flag_columns(spec)})
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
    if kind == "bool":
        return isinstance(value, bool)
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


def write_tables(records: TrialRecords, sweep: SweepDir) -> None:
    """Write ``sweep``'s tables whole from ``records``, once (a single trial's tables, a
    notebook's, a test's). A running sweep's record keeps one :class:`TablesWriter`, which
    after its first write appends only the reports that arrived since.

    Raises:
        StorageError: A file could not be written; what is on disk is whole.
    """
    TablesWriter(sweep).write(records)
