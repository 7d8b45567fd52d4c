"""The sweep directory and everything in it. Imports neither Ray nor torch.

============  =========================================================================
layout        :class:`SweepDir`: every file name in a sweep; atomic writes; the one
              fence every deletion goes through (:func:`remove_inside`)
status        the trial and sweep statuses and what they mean together
records       :class:`TrialRecords`: per-trial state fed by Tune's results
tables/       records -> ``trials.parquet`` / ``history.parquet``; readers for notebooks;
              the tables read back for a resume
parts         the history as a directory of Parquet parts: appends, compaction, reading
arrow_values  report values -> Arrow arrays typed as pandas types them (the appends)
manifest      ``manifest.json``: what ran, where, how it ended; who the driver is
procs         processes as the manifest records them (pid + start time + machine)
retention     which checkpoints a sweep keeps
summary       counts, best trial and the live status line, as text
listing       ``hpsearch ls``
============  =========================================================================

May import: ``hpsearch.errors``, ``hpsearch.space`` (the spec), pandas/pyarrow (inside
functions), yaml. Never Ray, torch or Optuna: a test checks this.
"""

from hpsearch.store.layout import SweepDir, remove_inside, storage_root
from hpsearch.store.listing import list_sweeps
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import read_history, read_trials

__all__ = ["SweepDir", "TrialRecords", "list_sweeps", "read_history", "read_trials",
           "remove_inside", "storage_root"]
