"""The history table as a dataset of Parquet parts, so that a write costs what it adds.

``history.parquet`` is a directory (the layout Spark writes, and that pandas, pyarrow,
DuckDB and Spark read as one table)::

    history.parquet/
      part-000000000000-000000000000.parquet   no rows: the schema of the whole table
      part-000000000000-000000004096.parquet   history rows [0, 4096), in arrival order
      part-000000004096-000000004103.parquet   rows [4096, 4103): one write's new reports
      .part-000000004103-000000004110.parquet.tmp-<pid>   being written; readers skip it

* **Appends.** Each write adds one part holding the rows reported since the previous
  write, written like every table (:func:`~hpsearch.store.layout.write_atomic`: a hidden
  temporary file, flushed, then renamed), so a reader never sees half a part.
* **Compaction.** Every :data:`FAN_IN` consecutive parts of one level are merged into one
  part of the next level, up to :data:`TOP_LEVEL`: each row is rewritten at most
  ``TOP_LEVEL`` times, and no write merges more than ``FAN_IN ** TOP_LEVEL`` writes' rows,
  however long the history. The merged part is written before the parts it replaces are
  deleted; a reader that lists both keeps the bigger (:func:`cover`).
* **Schema.** Reports may bring new columns, and a dataset reader takes its schema from
  the first file. The zero-row schema part sorts first and holds every column with its
  type (and pandas' dtypes), so ``pd.read_parquet(dir)`` returns every column.
* **A new writer** (a driver that starts, a resume) writes its records' whole history as
  one part, then deletes the older parts: the one write that costs all rows.

A column whose values mix types (``32`` and ``"auto"``) is stored as strings, as in the
single-file layout; when one first does, the history is written whole again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from hpsearch.errors import DamagedSweepError, StorageError
from hpsearch.store.arrow_values import (
    Unfit,
    all_numbers,
    infer_array,
    is_missing,
    pandas_entry,
    to_arrow,
)
from hpsearch.store.layout import SweepDir, fsync_dir, write_atomic

__all__ = ["FAN_IN", "HistoryWriter", "LEAD_COLUMNS", "TOP_LEVEL", "cover", "read_dataset",
           "unified_schema"]

#: Parts of one level merged into one of the next.
FAN_IN = 8
#: The highest level a merge produces; parts of this level are never merged again.
TOP_LEVEL = 3
#: The history's first columns, in this order; the others follow alphabetically.
LEAD_COLUMNS = ("trial_id", "step", "epoch", "time_total_s")


class PartsOverlap(Exception):
    """Two parts hold some of the same rows and neither holds all of the other's: a
    writer is replacing the parts right now (read again), or the directory was edited."""


def cover(parts: Iterable[tuple[int, int, Any]]) -> list[tuple[int, int, Any]]:
    """The parts that hold each row once, in row order.

    A part inside a bigger one is left out: a compaction wrote the bigger one and has not
    deleted the parts it replaces yet. The schema part (no rows) is left out too.

    Raises:
        PartsOverlap: Two parts overlap without one holding the other.

    Example:
        >>> [p[:2] for p in cover([(0, 8, "a"), (8, 9, "b"), (0, 64, "c"), (64, 70, "d")])]
        [(0, 64), (64, 70)]
    """
    chosen: list[tuple[int, int, Any]] = []
    end = 0
    for part in sorted(parts, key=lambda p: (p[0], -p[1])):
        first, stop = part[0], part[1]
        if stop <= first or stop <= end:
            continue  # the schema part, or inside a part already chosen
        if first < end:
            raise PartsOverlap(f"parts [{first}, {stop}) and [..., {end}) overlap")
        chosen.append(part)
        end = stop
    return chosen


# --- reading ---------------------------------------------------------------------------------


def read_dataset(dataset: Path, *, retries: int = 20):
    """The history dataset at ``dataset`` as one Arrow table (``None`` for a directory
    without parts).

    A writer may merge parts while this reads: a part that disappears between listing and
    reading, or parts that overlap for a moment, make it list and read again.

    Raises:
        DamagedSweepError: A part cannot be read (after the retries).
    """
    import pyarrow as pa

    error: Exception | None = None
    for attempt in range(retries + 1):
        try:
            return _read_once(dataset)
        except (FileNotFoundError, PartsOverlap, pa.ArrowInvalid, pa.ArrowTypeError,
                OSError) as exc:
            error = exc
            if attempt < retries:
                time.sleep(min(0.01 * 2 ** attempt, 0.2))
    raise DamagedSweepError(
        f"{dataset} cannot be read as a table ({type(error).__name__}: {_short(error)})"
    ) from None


def _read_once(dataset: Path):
    listed = SweepDir.history_parts(dataset)
    if not listed:
        if not dataset.is_dir():
            raise FileNotFoundError(dataset)
        return None
    return read_parts(dataset, cover(listed), schema_part=_schema_part(listed))


def _schema_part(listed: Sequence[tuple[int, int, Path]]) -> Path | None:
    return next((p for first, end, p in listed if first == end == 0), None)


def read_parts(dataset: Path, parts: Sequence[tuple[int, int, Path]], *,
               schema_part: Path | None):
    """Read ``parts`` (chosen by :func:`cover`) into one table whose schema is the union
    of theirs, with the schema part's columns first and its pandas metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(p) for _, _, p in parts]
    schema = unified_schema(pq.read_schema(schema_part) if schema_part is not None else None,
                            [t.schema for t in tables])
    if schema is None:
        return None
    if not tables:
        return schema.empty_table()
    table = pa.concat_tables([conform(t, schema) for t in tables])
    return table.replace_schema_metadata(schema.metadata)


def unified_schema(schema_part, schemas):
    """The union of the parts' schemas, led by the schema part's (its column order and
    pandas metadata); ``None`` without any.

    A whole rewrite (a column that now mixes types is stored as strings) replaces the
    schema part and the data part one after the other: between the two, or after a writer
    killed there, the schema part may not fit the parts. The parts then decide alone.
    """
    import pyarrow as pa

    if schema_part is None and not schemas:
        return None
    try:
        return pa.unify_schemas(([schema_part] if schema_part is not None else []) + schemas,
                                promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        if schema_part is None or not schemas:
            raise
        return pa.unify_schemas(schemas, promote_options="permissive")


def conform(table, schema):
    """``table`` with exactly ``schema``'s columns, in its order (missing ones null)."""
    import pyarrow as pa

    n = table.num_rows
    columns = []
    for field in schema:
        if field.name in table.column_names:
            col = table.column(field.name)
            columns.append(col if col.type == field.type else col.cast(field.type))
        else:
            columns.append(pa.nulls(n, type=field.type))
    return pa.Table.from_arrays(columns, schema=schema)


# --- writing ---------------------------------------------------------------------------------


class HistoryWriter:
    """Keeps the history dataset of one sweep directory in step with a records' history.

    Plain state of one driver process: which rows are on disk, the parts it wrote and
    their levels, the table's schema. It assumes it is the dataset's only writer.
    """

    def __init__(self, sweep: SweepDir, dataset: Path | None = None):
        self.sweep = sweep
        self.dataset = dataset or sweep.history
        self.written: int | None = None  # rows of records.history on disk
        self.rewrites: int | None = None  # records.rewrites when they were written
        self.parts: list[list[int]] = []  # [first, end, level] of the parts written here
        self.schema = None  # pyarrow.Schema of the whole table, with pandas metadata
        self.strings: set[str] = set()  # columns stored as strings (values of mixed types)
        self.entries: dict[str, dict] = {}  # pandas metadata per column
        self.meta: dict[str, Any] = {}  # pandas metadata besides the columns
        self.tables: dict[tuple[int, int], Any] = {}  # parts below the top level, to merge
        self.full_writes = 0
        self.rows_converted = 0  # rows turned into Arrow by this writer (tests count work)

    # --- the two kinds of write ---------------------------------------------------------

    def write(self, records: Any, frame_of=None) -> None:
        """Write what ``records.history`` holds and the dataset does not.

        Args:
            frame_of: ``rows -> (DataFrame, stringified columns)``, the single-file
                layout's conversion (:func:`hpsearch.store.tables.history_frame`); used
                for whole writes, so both layouts store the same types.

        Raises:
            StorageError: A part could not be written; the dataset is as before.
        """
        history = records.history
        if (self.written is None or records.rewrites != self.rewrites
                or len(history) < self.written or not self.dataset.is_dir()):
            self.write_all(records, frame_of)
            return
        if len(history) == self.written:
            return
        first, end = self.written, len(history)
        try:
            table, schema = self._append_table(history[first:end])
        except Unfit:
            self.write_all(records, frame_of)
            return
        if schema is not self.schema:
            self._write_schema(self.dataset, schema)
            self.schema = schema
        self._write_part(self.dataset, first, end, table)
        self.written = end
        self.parts.append([first, end, 0])
        self.tables[(first, end)] = table
        try:
            self._compact()
        except StorageError:
            pass  # the new rows are on disk; merging waits for the next write

    def write_all(self, records: Any, frame_of) -> None:
        """Write the whole history as one part and delete every other part (a new writer,
        or rows that fit no longer). Converts a single-file history into a dataset."""
        import pyarrow as pa

        rows = records.history
        df, strings = frame_of(rows)
        table = pa.Table.from_pandas(df, preserve_index=False)
        self.rows_converted += len(rows)
        schema = table.schema
        if self.dataset.is_dir() and not self.dataset.is_symlink():
            self._write_schema(self.dataset, schema)
            if len(rows):
                self._write_part(self.dataset, 0, len(rows), table)
            keep = {SweepDir.history_part(self.dataset, 0, 0),
                    SweepDir.history_part(self.dataset, 0, len(rows))}
            for _, _, path in SweepDir.history_parts(self.dataset):
                if path not in keep:
                    try:
                        self.sweep.remove(path)
                    except OSError:
                        pass  # covered by the new part; the next whole write removes it
        else:
            self._create(schema, table, len(rows))
        self.written, self.rewrites = len(rows), records.rewrites
        self.schema, self.strings = schema, set(strings)
        self._note_metadata(schema)
        self.parts = [[0, len(rows), TOP_LEVEL]] if len(rows) else []
        self.tables = {}
        self.full_writes += 1

    def _create(self, schema, table, n: int) -> None:
        """Build the dataset in a hidden directory, then rename it into place: readers see
        no history, then a whole one. A single-file history (layout 2) is deleted only
        once its rows are in the new directory (``load_tables`` finishes a conversion a
        killed writer left half done)."""
        tmp = SweepDir.temp_for(self.dataset)
        try:
            if os.path.lexists(tmp):
                self.sweep.remove(tmp)
            tmp.mkdir(parents=True)
            self._write_schema(tmp, schema)
            if n:
                self._write_part(tmp, 0, n, table)
            fsync_dir(tmp)
            if os.path.lexists(self.dataset):
                self.sweep.remove(self.dataset)  # the single-file history: its rows are in tmp
            os.replace(tmp, self.dataset)
            fsync_dir(self.dataset.parent)
        except (OSError, StorageError) as exc:
            try:  # a full disk keeps no half-built copy: it is ours, and hidden
                self.sweep.remove(tmp)
            except OSError:
                pass
            if isinstance(exc, StorageError):
                raise
            raise StorageError(
                f"cannot write {self.dataset.name} in {self.dataset.parent}: "
                f"{exc.strerror or exc}. Free disk space or fix permissions, then "
                "`hpsearch resume`.", errno=exc.errno
            ) from None

    # --- appends ------------------------------------------------------------------------

    def _append_table(self, rows: Sequence[Mapping[str, Any]]):
        """New rows as an Arrow table typed like the dataset, and the dataset's schema
        after them (the same object when no column is new or wider)."""
        import pyarrow as pa

        names: dict[str, None] = {}
        for row in rows:
            names.update(dict.fromkeys(row))
        fields = {f.name: f for f in self.schema}
        arrays, widened = {}, {}
        for name in names:
            values = [row.get(name) for row in rows]
            if name in self.strings:
                values = [None if is_missing(v) else str(v) for v in values]
            field = fields.get(name)
            if field is not None and not pa.types.is_null(field.type):
                try:
                    arrays[name] = to_arrow(values, field.type)
                    continue
                except Unfit:
                    if not (pa.types.is_integer(field.type) and all_numbers(values)):
                        raise
                    arrays[name] = to_arrow(values, pa.float64())  # a wider column
            else:
                arrays[name] = infer_array(values)
            if field is None or arrays[name].type != field.type:
                widened[name] = arrays[name].type
        self.rows_converted += len(rows)
        schema = self._widen(widened) if widened else self.schema
        table = pa.table({n: a if a.type == schema.field(n).type else a.cast(schema.field(n).type)
                          for n, a in arrays.items()})
        return table, schema

    def _widen(self, widened: Mapping[str, Any]):
        """The dataset's schema with new columns, and null or integer columns widened."""
        import pyarrow as pa

        types = {f.name: f.type for f in self.schema}
        for name, new in widened.items():
            types[name] = new
            self.entries[name] = pandas_entry(name, new)
        order = [c for c in LEAD_COLUMNS if c in types] + \
            sorted(c for c in types if c not in LEAD_COLUMNS)
        meta = {**self.meta, "columns": [self.entries[c] for c in order if c in self.entries]}
        return pa.schema([pa.field(c, types[c]) for c in order],
                         metadata={b"pandas": json.dumps(meta).encode()})

    def _note_metadata(self, schema) -> None:
        meta = json.loads((schema.metadata or {}).get(b"pandas", b"{}") or b"{}")
        self.entries = {e["name"]: e for e in meta.get("columns", []) if e.get("name")}
        self.meta = {k: v for k, v in meta.items() if k != "columns"}
        self.meta.update(index_columns=[], column_indexes=[])

    # --- compaction ---------------------------------------------------------------------

    def _compact(self) -> None:
        """Merge the last ``FAN_IN`` parts while they share a level below the top. The
        parts to merge are still in memory (:attr:`tables`: at most ``FAN_IN - 1`` per
        level), so a merge reads nothing back."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        while len(self.parts) >= FAN_IN:
            tail = self.parts[-FAN_IN:]
            level = tail[-1][2]
            if level >= TOP_LEVEL or any(p[2] != level for p in tail):
                return
            paths = [SweepDir.history_part(self.dataset, first, end) for first, end, _ in tail]
            tables = [self.tables.pop((first, end), None) for first, end, _ in tail]
            tables = [conform(t if t is not None else pq.read_table(p), self.schema)
                      for t, p in zip(tables, paths)]
            first, end = tail[0][0], tail[-1][1]
            merged = pa.concat_tables(tables)
            self._write_part(self.dataset, first, end, merged)
            for path in paths:  # the merged part is whole on disk: these are duplicates now
                try:
                    self.sweep.remove(path)
                except OSError:
                    pass  # a reader keeps the merged part (cover); the next writer removes it
            del self.parts[-FAN_IN:]
            self.parts.append([first, end, level + 1])
            if level + 1 < TOP_LEVEL:
                self.tables[(first, end)] = merged

    # --- files ----------------------------------------------------------------------------

    def _write_part(self, dataset: Path, first: int, end: int, table) -> None:
        import pyarrow.parquet as pq

        write_atomic(SweepDir.history_part(dataset, first, end),
                     lambda tmp: pq.write_table(table, tmp), what=f"a part of {self.dataset.name}")

    def _write_schema(self, dataset: Path, schema) -> None:
        import pyarrow.parquet as pq

        write_atomic(SweepDir.history_part(dataset, 0, 0),
                     lambda tmp: pq.write_table(schema.empty_table(), tmp),
                     what=f"the schema of {self.dataset.name}")


def _short(exc: BaseException | None, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
