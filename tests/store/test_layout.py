"""The deletion fence and sweep names, on real directories: nothing outside a sweep is
ever deleted, whatever a trial id read from disk or a name on the command line says."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from hpsearch.errors import DamagedSweepError
from hpsearch.space.spec import FloatParam, Objective, Spec
from hpsearch.store.layout import (
    SweepDir,
    UnsafePathError,
    check_sweep_name,
    remove_inside,
)
from hpsearch.store.records import TrialRecords
from hpsearch.store.retention import prune_checkpoints
from hpsearch.store.tables import load_tables, write_tables


@pytest.fixture
def tree(tmp_path):
    """A storage root with one sweep and, beside it, someone else's project."""
    root = tmp_path / "runs"
    sweep = SweepDir(root / "s")
    (sweep.path / "checkpoints" / "abc12345" / "checkpoint_000000001").mkdir(parents=True)
    other = tmp_path / "project" / "src"
    other.mkdir(parents=True)
    (other / "main.js").write_text("keep me")
    return sweep, other


@pytest.mark.parametrize("target", ["../../project/src", "..", ".", "", "/etc"])
def test_the_fence_refuses_anything_not_strictly_inside(tree, target):
    sweep, other = tree
    with pytest.raises(UnsafePathError):
        remove_inside(sweep.path, sweep.path / target if target else sweep.path)
    assert (other / "main.js").read_text() == "keep me" and sweep.path.is_dir()


def test_a_symlink_inside_is_removed_as_a_link_and_never_followed(tree):
    sweep, other = tree
    link = sweep.path / "link"
    link.symlink_to(other)
    assert remove_inside(sweep.path, link)
    assert not os.path.lexists(link) and (other / "main.js").exists()
    # A path that goes through a link out of the sweep is outside.
    link.symlink_to(other)
    with pytest.raises(UnsafePathError):
        remove_inside(sweep.path, link / "main.js")
    assert (other / "main.js").exists()


def test_the_fence_deletes_what_is_inside(tree):
    sweep, _ = tree
    target = sweep.path / "checkpoints" / "abc12345"
    assert remove_inside(sweep.path, target) and not target.exists()
    assert not remove_inside(sweep.path, target)  # already gone


@pytest.mark.parametrize("name", ["/abs/path", "../x", "a/b", "..", ".", "", "-rf", "x" * 101,
                                  "a\x00b", "sp ace"])
def test_sweep_names_that_would_leave_the_storage_are_refused(name):
    with pytest.raises(UnsafePathError):
        check_sweep_name(name)
    with pytest.raises(UnsafePathError):
        SweepDir.at("/tmp/runs", name)


@pytest.mark.parametrize("bad_id", ["../../project/src", "*", "abc12345/../..", ""])
def test_retention_never_follows_a_tampered_trial_id(tree, bad_id):
    sweep, other = tree
    spec = Spec(name="s", trainable="digits", objective=Objective("val_loss", "min"),
                params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={})
    spec = type(spec)(**{**spec.__dict__, "checkpoints": type(spec.checkpoints)(
        keep=1, keep_best_trials=0)})
    records = TrialRecords(spec)
    for tid in ("abc12345", bad_id):
        records.trials[tid] = {"trial_id": tid, "status": "completed", "best_value": 1.0}
    prune_checkpoints(records, sweep)
    assert (other / "main.js").read_text() == "keep me"
    assert not sweep.checkpoint_dirs("abc12345")  # the real one was pruned
    assert sweep.path.is_dir()


def test_a_trial_table_with_a_tampered_id_is_refused_on_resume(tree):
    sweep, _ = tree
    pd.DataFrame({"trial_id": ["abc12345", "../../x"], "status": ["completed"] * 2}).to_parquet(
        sweep.trials)
    with pytest.raises(DamagedSweepError, match="does not look like a trial id"):
        load_tables(sweep)


def _spec():
    return Spec(name="s", trainable="digits", objective=Objective("val_loss", "min"),
                params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={})


def _written(sweep, n):
    records = TrialRecords(_spec())
    for i in range(n):
        tid = f"t{i:07d}"
        records.start(tid, {"lr": 0.01})
        records.result(tid, {"val_loss": 1.0, "step": 1, "epoch": 1})
        records.end(tid)
    write_tables(records, sweep)
    return records


def test_resume_reads_a_complete_temporary_copy_when_the_table_is_damaged(tree):
    sweep, _ = tree
    _written(sweep, 3)
    good = sweep.trials.read_bytes()
    tmp = SweepDir.temp_for(sweep.trials, 4242)
    tmp.write_bytes(good)  # a killed writer's complete copy, never renamed
    sweep.trials.write_bytes(good[: len(good) // 2])  # the table itself is truncated
    os.utime(tmp, (os.path.getmtime(sweep.trials) + 5,) * 2)
    trials, history = load_tables(sweep)
    assert len(trials) == 3 and len(history) == 3
    assert not tmp.exists()  # removed only once everything was read


def test_a_damaged_table_with_no_complete_copy_is_one_clear_error_and_nothing_is_deleted(tree):
    sweep, _ = tree
    _written(sweep, 2)
    sweep.trials.write_bytes(b"garbage")
    half = SweepDir.temp_for(sweep.trials, 4242)
    half.write_bytes(b"PAR1 also garbage")
    with pytest.raises(DamagedSweepError, match="damaged and no complete copy is left"):
        load_tables(sweep)
    assert half.exists() and sweep.trials.read_bytes() == b"garbage"


def test_a_history_without_its_trial_table_is_refused(tree):
    sweep, _ = tree
    _written(sweep, 2)
    sweep.trials.unlink()
    with pytest.raises(DamagedSweepError, match="history table but no trial table"):
        load_tables(sweep)
    assert sweep.history.exists()
