"""A trial's checkpoint store, keyed by its hpsearch id (no Ray needed)."""

from __future__ import annotations

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
