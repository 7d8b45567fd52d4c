"""Both tables read back for a resume, checked before anything is changed, and recovered
from the complete copies a killed writer left (:func:`load_tables`)."""

from __future__ import annotations

import os
from pathlib import Path

from hpsearch.errors import DamagedSweepError
from hpsearch.store.layout import SweepDir, UnsafePathError, check_trial_id
from hpsearch.store.parts import PartsOverlap, conform, cover, unified_schema
from hpsearch.store.tables.readers import _empty_history, _read_parquet

__all__ = ["load_tables"]


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
