"""The history as a dataset of Parquet parts (layout 3): writes cost the new reports, every
reader sees each row once, old single-file sweeps still read and resume. No Ray; work is
counted in rows, not timed."""

import os

import pandas as pd
import pytest

from hpsearch.store import parts
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import (
    history_frame,
    load_tables,
    read_history,
)
from .writing import write_tables, writer_of

from .test_tables import feed, make_spec


def run_sweep(records, sweep, n, *, start=0, reports=3, diverge=None):
    """``n`` trials, each written when it ends, as the Tune callback writes them."""
    for i in range(start, start + n):
        tid = f"{i:08x}"
        feed(records, tid, [0.9 - 0.01 * k for k in range(reports)])
        if i == diverge:  # a column that appears only in a later part
            records.result(tid, {"step": 10 * (reports + 1), "epoch": reports + 1,
                                 "val_loss": float("inf"), "status": "diverged",
                                 "reason": "loss is nan", "training_iteration": reports + 1})
        records.end(tid)
        write_tables(records, sweep)


def test_each_write_converts_only_the_reports_that_arrived_since_the_last(tmp_path):
    sweep, records = SweepDir.of(tmp_path), TrialRecords(make_spec())
    run_sweep(records, sweep, 200)
    writer = writer_of(records, sweep).history
    assert len(records.history) == 600
    # Each report became Arrow once; compactions merge Arrow tables, converting nothing.
    assert writer.rows_converted == 600 and writer.full_writes == 1
    # Compaction keeps the parts few: at most FAN_IN - 1 per level below the top.
    assert len(parts.cover(SweepDir.history_parts(sweep.history))) <= \
        200 // parts.FAN_IN ** parts.TOP_LEVEL + 1 + (parts.FAN_IN - 1) * parts.TOP_LEVEL


def test_pandas_reads_the_dataset_as_read_history_does_with_every_column(tmp_path):
    sweep, records = SweepDir.of(tmp_path), TrialRecords(make_spec())
    run_sweep(records, sweep, 40, diverge=30)
    ours = read_history(sweep.path)
    theirs = pd.read_parquet(sweep.history)
    pd.testing.assert_frame_equal(ours, theirs)
    pd.testing.assert_frame_equal(ours, history_frame(records), check_dtype=False)
    assert len(ours) == len(records.history) == 121
    assert str(ours["step"].dtype) == "Int64" and "reason" in ours.columns
    assert ours["reason"].notna().sum() == 1


def test_a_half_written_part_is_invisible_and_a_resume_removes_it_through_the_fence(tmp_path):
    sweep, records = SweepDir.of(tmp_path), TrialRecords(make_spec())
    run_sweep(records, sweep, 5)
    half = SweepDir.temp_for(SweepDir.history_part(sweep.history, 15, 18))
    half.write_bytes(b"PAR1 half a part")  # a writer killed mid-write
    assert half.name.startswith(".")
    assert len(pd.read_parquet(sweep.history)) == len(read_history(sweep.path)) == 15
    trials, history = load_tables(sweep)
    assert len(history) == 15 and len(trials) == 5
    assert not half.exists()


def test_a_compaction_killed_before_it_deleted_its_parts_loses_and_doubles_nothing(tmp_path):
    sweep, records = SweepDir.of(tmp_path), TrialRecords(make_spec())
    run_sweep(records, sweep, 3)
    listed = SweepDir.history_parts(sweep.history)
    # The merged part is on disk, the parts it replaces are not deleted yet.
    merged = pd.concat([pd.read_parquet(p) for f, e, p in listed if e > f])
    merged.to_parquet(SweepDir.history_part(sweep.history, 0, 9), index=False)
    assert len(read_history(sweep.path)) == 9
    _, history = load_tables(sweep)
    assert len(history) == 9


def test_a_resumed_driver_appends_after_the_reports_already_written(tmp_path):
    sweep, records = SweepDir.of(tmp_path), TrialRecords(make_spec())
    run_sweep(records, sweep, 4)
    # A new driver (resume) continues from the tables alone.
    trials, history = load_tables(sweep)
    resumed = TrialRecords(make_spec())
    resumed.load(trials, history)
    run_sweep(resumed, sweep, 3, start=4)
    assert len(read_history(sweep.path)) == 21
    assert list(read_history(sweep.path).trial_id.unique()) == [f"{i:08x}" for i in range(7)]


def test_a_sweep_with_a_single_file_history_reads_resumes_and_becomes_a_dataset(tmp_path):
    sweep, records = SweepDir.of(tmp_path), TrialRecords(make_spec())
    for i in range(3):
        feed(records, f"{i:08x}", [0.5, 0.4])
        records.end(f"{i:08x}")
    # The layout before 3: both tables one file each.
    from hpsearch.store.tables import trials_frame

    trials_frame(records).to_parquet(sweep.trials, index=False)
    history_frame(records).to_parquet(sweep.history, index=False)
    assert sweep.history.is_file() and len(read_history(sweep.path)) == 6

    trials, history = load_tables(sweep)
    resumed = TrialRecords(make_spec())
    resumed.load(trials, history)
    run_sweep(resumed, sweep, 2, start=3, reports=2)
    assert sweep.history.is_dir()
    got = pd.read_parquet(sweep.history)
    assert len(got) == 10 and got.trial_id.nunique() == 5


def test_a_conversion_killed_before_its_rename_is_finished_on_resume(tmp_path):
    sweep, records = SweepDir.of(tmp_path), TrialRecords(make_spec())
    run_sweep(records, sweep, 3)
    # Killed after the single file was deleted and before the new directory got its name.
    hidden = SweepDir.temp_for(sweep.history)
    os.replace(sweep.history, hidden)
    trials, history = load_tables(sweep)
    assert len(history) == 9 and sweep.history.is_dir() and not hidden.exists()
    assert len(pd.read_parquet(sweep.history)) == 9


def test_counts_look_only_at_rows_changed_since_the_last_call():
    records = TrialRecords(make_spec())
    for i in range(50):
        feed(records, f"{i:08x}", [0.5])
        records.end(f"{i:08x}", errored=i % 2 == 0)
        records.counts()  # asked at every step, as the all-failed stop asks
    assert records.counts() == {"failed": 25, "stopped_by_asha": 25}
    # 50 rows, each changed a few times between two calls: about one look per change.
    assert records.rows_counted <= 2 * 50


@pytest.mark.parametrize("mode", ["min", "max"])
def test_the_pruner_keeps_what_a_full_ranking_keeps_and_ranks_each_ended_trial_once(
        tmp_path, mode):
    import random

    from hpsearch.store.retention import CheckpointPruner, trials_to_prune

    spec = make_spec(mode)
    spec = type(spec)(**{**spec.__dict__, "checkpoints": type(spec.checkpoints)(
        keep=1, keep_best_trials=3)})
    records, sweep = TrialRecords(spec), SweepDir(tmp_path)
    pruner = CheckpointPruner()
    rng = random.Random(0)
    for i in range(60):
        tid = f"{i:08x}"
        (tmp_path / "checkpoints" / tid / "checkpoint_000000").mkdir(parents=True)
        losses = [rng.random()] if i % 7 else [float("nan")]  # some never score
        feed(records, tid, losses)
        records.end(tid, errored=i % 11 == 0)
        pruner.prune(records, sweep)
        # Nothing is left for a full ranking to prune.
        assert trials_to_prune(records.trials, objective=spec.objective,
                               keep_best_trials=3) == []
    kept = {t for t in records.trials if sweep.checkpoint_dirs(t)}
    scored = sorted((spec.objective.score(r.get("best_value")), t)
                    for t, r in records.trials.items())
    assert kept == {t for _, t in scored[:3]}
    assert pruner.rows_ranked <= 2 * 60  # not 60 x 60


def test_a_whole_rewrite_killed_after_its_new_schema_part_still_reads_and_resumes(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    sweep, records = SweepDir.of(tmp_path), TrialRecords(make_spec())
    for i in range(3):
        tid = f"{i:08x}"
        records.start(tid, {"lr": 0.01, "precision": "bf16"})
        records.result(tid, {"step": 1, "epoch": 1, "val_loss": 0.5, "batch": 32})
        records.end(tid)
        write_tables(records, sweep)
    # The next report says "auto": the writer stores `batch` as strings, and replaces the
    # schema part first. Killed there: the data parts still hold integers.
    schema_part = SweepDir.history_part(sweep.history, 0, 0)
    old = pq.read_schema(schema_part)
    new = old.set(old.get_field_index("batch"), pa.field("batch", pa.string()))
    pq.write_table(new.empty_table(), schema_part)
    assert list(read_history(sweep.path)["batch"]) == [32, 32, 32]
    _, history = load_tables(sweep)
    assert [h["batch"] for h in history] == [32, 32, 32]
