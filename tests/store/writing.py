"""One :class:`TablesWriter` per records and directory, as a sweep's record keeps one for its
run: the tests here write the same records again and again, and check what a writer that
knows what is on disk appends."""

from __future__ import annotations

import weakref

from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import TablesWriter

_WRITERS: "weakref.WeakKeyDictionary[TrialRecords, dict]" = weakref.WeakKeyDictionary()


def writer_of(records: TrialRecords, sweep: SweepDir) -> TablesWriter:
    """The writer of ``records`` into ``sweep`` (made on first use)."""
    return _WRITERS.setdefault(records, {}).setdefault(sweep.path, TablesWriter(sweep))


def write_tables(records: TrialRecords, sweep: SweepDir) -> None:
    """Bring ``sweep``'s tables up to date with ``records`` through its writer."""
    writer_of(records, sweep).write(records)
