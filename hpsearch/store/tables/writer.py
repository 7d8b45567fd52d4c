"""Both tables of a sweep directory kept up to date with a records: :class:`TablesWriter`.

The trial table is replaced whole at each write; the history appends the reports that
arrived since the previous write (:class:`hpsearch.store.parts.HistoryWriter`).
"""

from __future__ import annotations

from pathlib import Path

from hpsearch.store.layout import SweepDir, write_atomic
from hpsearch.store.parts import HistoryWriter
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables.frames import history_rows_frame, trials_frame

__all__ = ["TablesWriter", "write_parquet_atomic", "write_tables"]


def write_parquet_atomic(df, path: Path) -> None:
    """Write ``df`` so a reader sees the old file or the new one, even after a power cut."""
    write_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


class TablesWriter:
    """Both tables of one sweep directory, written from one records (the history first).

    The trial table is converted through pandas (:func:`trials_frame`) and replaced whole
    at each write: at most every 2 s of a sweep, that is 0.3% of a 2,000-trial sweep's
    driver time (``benchmarks/README.md``, ``structure.py``), so the cell-by-cell Arrow
    path that once saved part of it is gone. The history appends the reports that arrived
    since the previous write (:class:`~hpsearch.store.parts.HistoryWriter`)."""

    def __init__(self, sweep: SweepDir):
        self.sweep = sweep
        self.history = HistoryWriter(sweep)

    def write(self, records: TrialRecords) -> None:
        # The history first: a write cut between the two (a power cut) leaves a trial table
        # that names no report the history lacks; the next write or a resume catches up.
        self.history.write(records, history_rows_frame)
        self.write_trials(records)

    def write_trials(self, records: TrialRecords) -> None:
        """Replace ``trials.parquet`` with ``records``' trial table."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(trials_frame(records), preserve_index=False)
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
