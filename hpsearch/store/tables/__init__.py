"""Trial tables: :class:`TrialRecords` -> ``trials.parquet`` and ``history.parquet``.

A sweep's record writes both tables atomically and durably at most every 2 s while
anything changes, and at the end of the run
(:meth:`hpsearch.driver.record.sweep_record.SweepRecord.flush`), so a notebook can read
them at any moment of a sweep. Readers (:func:`read_trials`, :func:`read_history`) import only
pandas and pyarrow. The schema and the layout are in ``docs/trial-tables.md``.

What a write costs:

* ``trials.parquet`` is one file, converted through pandas and replaced whole (atomic
  rename): one row per trial, about 17 ms per write at 2,000 trials on a busy 2-core
  machine. At most one write every 2 s, that is 0.3% of a 2,000-trial sweep's driver time.
* ``history.parquet``, the table that grows (reports x trials), is a directory of parts
  (:mod:`hpsearch.store.parts`): a write converts and appends only the reports that
  arrived since the previous one.

A :class:`TablesWriter` holds what is on disk; a sweep's record owns one for its run.
:func:`write_tables` writes both tables whole, once.

============  =========================================================================
frames        records -> DataFrames with stable column types (the pandas conversion)
writer        :class:`TablesWriter`, :func:`write_tables`: both tables kept up to date
readers       :func:`read_trials`, :func:`read_history` for notebooks; cells as Python
resume        :func:`load_tables`: both tables read back and checked for a resume
single        the tables of one trial run without a sweep (``hpsearch trial --output``)
============  =========================================================================

Every name is importable from here, as it was before the module became a package.
"""

from __future__ import annotations

from hpsearch.store.tables.frames import history_frame, trials_frame
from hpsearch.store.tables.readers import python_value, read_history, read_trials
from hpsearch.store.tables.resume import load_tables
from hpsearch.store.tables.single import prepare_single_trial_dir, write_single_trial
from hpsearch.store.tables.writer import TablesWriter, write_parquet_atomic, write_tables

__all__ = ["TablesWriter", "history_frame", "load_tables", "prepare_single_trial_dir",
           "python_value", "read_history", "read_trials", "trials_frame",
           "write_parquet_atomic", "write_single_trial", "write_tables"]
