"""The storage a sweep needs (the plan's ``storage`` line), the refusal of a disk that
cannot start it, and the line a full disk ends a sweep with. No Ray."""

from __future__ import annotations

import pytest

from hpsearch.driver.sweep.storage import (
    MARGIN,
    check_free_space,
    disk_full_error,
    storage_need,
)
from hpsearch.driver.trials.resolve import checkpoint_estimate
from hpsearch.errors import DiskFullError
from hpsearch.space import load_space, parse_space
from hpsearch.store.layout import SweepDir

QUICKSTART = "search_spaces/quickstart.yaml"


def test_the_worst_case_counts_running_and_kept_checkpoints_and_the_bookkeeping():
    spec = load_space(QUICKSTART)  # keep 2, keep_best_trials 3, 8 trials of 6 epochs
    need = storage_need(spec, 2, checkpoint=100_000)
    assert (need.running, need.kept) == (2 * 3, 3 * 2)  # one more while one replaces another
    assert need.bookkeeping == 8 * (40_000 + 6 * 2_000)
    assert need.total == 100_000 * 12 + need.bookkeeping
    assert need.to_start == 2 * 100_000 + MARGIN
    assert "12 checkpoints of ~100.0 KB" in need.line(10**12)
    assert "pauses when the disk fills" in need.line(need.total - 1)


def test_the_estimate_is_the_largest_model_the_space_builds_on_the_meta_device():
    base = {"name": "m", "trainable": "charlm", "objective": {"metric": "val_loss", "mode": "min"},
            "scheduler": {"type": "fifo", "max_t": 1}}
    small = parse_space({**base, "params": {"n_embd": 64, "lr": 0.01}})
    searched = parse_space({**base, "params": {"lr": 0.01, "n_embd": {"type": "categorical",
                                                          "choices": [64, 256]}}})
    big = parse_space({**base, "params": {"n_embd": 256, "lr": 0.01}})
    assert checkpoint_estimate(searched) == checkpoint_estimate(big) > checkpoint_estimate(small)
    command = parse_space({**base, "trainable": {"command": "python train.py --lr {lr}"},
                           "params": {"lr": {"type": "float", "low": 0.1, "high": 1}}})
    assert checkpoint_estimate(command) is None  # its checkpoints are its own


def test_a_sweeps_own_checkpoints_replace_the_estimate(tmp_path):
    sweep = SweepDir(tmp_path / "s")
    big = sweep.checkpoints / "t1" / "checkpoint_000000010"
    big.mkdir(parents=True)
    (big / "checkpoint.pt").write_bytes(b"x" * 5000)
    need = storage_need(load_space(QUICKSTART), 2, sweep=sweep, checkpoint=100)
    assert need.checkpoint == 5000 and need.measured
    assert "12 checkpoints of 5.0 KB" in need.line(None)


def test_a_disk_that_cannot_start_the_sweep_is_refused_in_one_line(tmp_path):
    from small_disk import fill, small_disk

    with small_disk(tmp_path / "disk", size_mb=2) as disk:
        need = storage_need(load_space(QUICKSTART), 2, checkpoint=100_000)
        assert "free" in check_free_space(need, SweepDir(disk / "s"), resume=False)
        fill(disk, leave=500_000)
        with pytest.raises(DiskFullError) as err:
            check_free_space(need, SweepDir(disk / "s"), resume=True)
        message = str(err.value)
        assert message.startswith(f"the disk holding {disk} has ")
        assert "needs 1.2 MB to start" in message and "Nothing was written" in message
        assert message.endswith(f"`hpsearch resume s --storage {disk}`.")
        assert "\n" not in message


def test_the_full_disk_line_names_the_directory_the_need_and_the_resume_command(tmp_path):
    sweep = SweepDir(tmp_path / "night")
    sweep.path.mkdir()
    need = storage_need(load_space(QUICKSTART), 2, checkpoint=100_000)
    message = str(disk_full_error(sweep, need))
    assert message.startswith(f"the disk holding {sweep} is full (") and " free)" in message
    assert "paused at their last checkpoint" in message
    assert f"needs up to {1.6:.1f} MB more" in message
    assert message.endswith(f"`hpsearch resume night --storage {tmp_path}`.")
