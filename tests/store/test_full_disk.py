"""A full disk, as each writer of the sweep directory meets it: a real tmpfs filled up
(``tests/small_disk.py``). A write the disk cannot take leaves the previous copy whole
and no temporary file behind, says it was a full disk, and succeeds again once space is
freed. And the classification of the many shapes a full disk's error takes."""

from __future__ import annotations

import errno
import shutil

import pytest
from small_disk import fill, free, small_disk
from store.test_tables import feed, make_spec

from hpsearch.errors import StorageError, is_disk_full, says_disk_full
from hpsearch.store.layout import SweepDir, fmt_bytes, free_bytes
from hpsearch.store.manifest import read_manifest, write_manifest
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import read_history, read_trials
from .writing import write_tables


@pytest.mark.parametrize("error, full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (shutil.Error([("a", "b", "[Errno 28] No space left on device: 'a' -> 'b'")]), True),
    (OSError("[errno 28] Error writing bytes to file"), True),  # pyarrow's
    (StorageError("cannot write trials.parquet", errno=errno.ENOSPC), True),
    (PermissionError(errno.EACCES, "Permission denied"), False),
    (RuntimeError("CUDA out of memory"), False),
    (ValueError("a bad value"), False),
])
def test_a_full_disk_is_recognised_in_every_shape_its_error_takes(error, full):
    assert is_disk_full(error) is full


def test_a_full_disk_is_recognised_when_wrapped_and_in_text():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("Training failed due to controller error") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)
    assert says_disk_full("ray.exceptions.RayTaskError: ... OSError: [Errno 28] No space")
    assert not says_disk_full("ValueError: lr must be positive") and not says_disk_full(None)


def test_free_space_is_read_from_the_nearest_existing_parent(tmp_path):
    assert free_bytes(tmp_path / "not" / "yet") == free_bytes(tmp_path) > 0
    assert fmt_bytes(999) == "999 B" and fmt_bytes(1_000_000) == "1.0 MB"


def test_tables_and_manifest_on_a_full_disk_keep_their_last_whole_copy(tmp_path):
    with small_disk(tmp_path / "disk", size_mb=2) as disk:
        sweep = SweepDir(disk / "s")
        sweep.path.mkdir()
        records = TrialRecords(make_spec())
        feed(records, "a", [0.9, 0.7])
        write_tables(records, sweep)
        write_manifest(sweep, {"name": "s", "status": "running"})
        before = {p.name: p.read_bytes() for p in sweep.path.rglob("*") if p.is_file()}
        for i in range(40):  # enough new rows that neither table fits in what is left
            feed(records, f"b{i}", [0.5] * 4)
        fill(disk)
        with pytest.raises(StorageError) as err:
            write_tables(records, sweep)
        assert err.value.errno == errno.ENOSPC and is_disk_full(err.value)
        with pytest.raises(StorageError):
            write_manifest(sweep, {"name": "s", "status": "finished", "pad": "x" * 10_000})
        after = {p.name: p.read_bytes() for p in sweep.path.rglob("*") if p.is_file()}
        assert after == before  # the same files, whole; no temporary one left
        assert len(read_trials(sweep.path)) == 1 and len(read_history(sweep.path)) == 2
        assert read_manifest(sweep)["status"] == "running"
        free(disk)
        write_tables(records, sweep)  # space again: the same writer goes on
        assert len(read_trials(sweep.path)) == 41 and len(read_history(sweep.path)) == 162
