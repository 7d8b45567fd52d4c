"""A trial's checkpoint store, keyed by its hpsearch id (no Ray needed)."""

from __future__ import annotations

import os

from hpsearch.driver.trials.checkpoints import CheckpointStore
from hpsearch.store.layout import SweepDir


def test_checkpoint_store_keeps_the_newest_and_resumes_from_the_last_whole_one(tmp_path):
    sweep = SweepDir(tmp_path)
    store = CheckpointStore(sweep, "t1", keep=2)
    assert store.latest() is None
    for step in (10, 20, 30):
        src = tmp_path / f"src{step}"
        src.mkdir()
        (src / "checkpoint.pt").write_text(str(step))
        store.add(str(src), step)
        assert not src.exists()  # the store owns it now
    assert [p.rsplit("_", 1)[1] for p in store.all()] == ["000000020", "000000030"]
    # A copy a killed process never finished stays out of sight.
    (sweep.trial_checkpoints("t1") / ".tmp-999-40").mkdir()
    assert open(f"{store.latest()}/checkpoint.pt").read() == "30"
    # Step 100 sorts after step 30: names are zero-padded.
    src = tmp_path / "src100"
    src.mkdir()
    store.add(str(src), 100)
    assert store.latest().endswith("checkpoint_000000100")


def test_a_checkpoint_the_disk_cannot_take_leaves_nothing_half_copied(tmp_path):
    """A real full disk: the copy into the sweep fails, no part of it stays there or in
    the temporary directory it came from, and the trial's newest checkpoint is the last
    whole one."""
    import errno
    import tempfile

    import pytest
    from small_disk import fill, free, small_disk

    from hpsearch.errors import is_disk_full
    from hpsearch.train.checkpoint import save

    with small_disk(tmp_path / "disk", size_mb=1) as disk:
        store = CheckpointStore(SweepDir(disk / "s"), "t1", keep=2)
        store.add(save({"w": b"a" * 1000}), 10)
        fill(disk, leave=8192)
        src = save({"w": b"b" * 200_000})  # in the temporary directory, off this disk
        assert not src.startswith(str(disk)) and src.startswith(tempfile.gettempdir())
        with pytest.raises(OSError) as err:
            store.add(src, 20)
        assert is_disk_full(err.value) or err.value.errno == errno.ENOSPC
        assert not os.path.exists(src)  # discarded, not left in /tmp
        root = store.root
        assert sorted(os.listdir(root)) == ["checkpoint_000000010"]  # no .tmp-* left
        assert store.latest().endswith("checkpoint_000000010")
        free(disk)
        store.add(save({"w": b"c" * 1000}), 30)
        assert store.latest().endswith("checkpoint_000000030")
