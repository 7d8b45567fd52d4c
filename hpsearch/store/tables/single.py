"""The tables of one trial run without a sweep (``hpsearch trial --output``): the
directory made and checked before training, then tables with a sweep's schema."""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from hpsearch.space.spec import Spec
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables.writer import write_tables

__all__ = ["prepare_single_trial_dir", "write_single_trial"]


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
        raise StorageError(f"cannot write to --output {out}: {exc.strerror or exc}",
                           errno=exc.errno) from None
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
