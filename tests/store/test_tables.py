"""Trial records and tables, driven by hand-made Tune results (no Ray)."""

import math

import pandas as pd
import pyarrow.parquet as pq
import pytest

from hpsearch.errors import StorageError
from hpsearch.space.spec import CategoricalParam, FloatParam, Objective, Scheduler, Spec
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.reports import final_status, sanitize_report
from hpsearch.store.tables import read_history, read_trials
from .writing import write_tables


def make_spec(mode="min", scheduler="asha"):
    return Spec(
        name="t", trainable="digits", objective=Objective("val_loss", mode),
        params=(FloatParam("lr", 1e-4, 1e-1, log=True),
                CategoricalParam("precision", ("fp32", "bf16"))),
        fixed={"batch_size": 64},
        scheduler=Scheduler(type=scheduler, max_t=4, grace_period=1, reduction_factor=2),
    )


def feed(records, tid, losses, *, params=None):
    records.start(tid, params or {"lr": 0.01, "precision": "bf16"})
    for i, loss in enumerate(losses, start=1):
        records.result(tid, {"step": 10 * i, "epoch": i, "val_loss": loss, "lr": 0.01,
                             "time_total_s": float(i), "training_iteration": i,
                             "config": {"lr": 0.01}, "precision": "bf16"})


@pytest.mark.parametrize(
    "last, kw, expected",
    [
        ({"epoch": 4}, {}, "completed"),
        ({"epoch": 1}, {}, "stopped_by_asha"),
        ({"epoch": 1, "status": "diverged"}, {}, "diverged"),
        ({"epoch": 1}, {"errored": True}, "failed"),
        ({"epoch": 2}, {"finished": False}, "running"),
        ({"epoch": 2}, {"budget_expired": True}, "stopped"),
        (None, {"finished": False}, "pending"),
    ],
)
def test_final_status(last, kw, expected):
    assert final_status(last, spec=make_spec(), **kw) == expected


@pytest.mark.parametrize("mode, best", [("min", 0.5), ("max", 0.9)])
def test_best_value_respects_mode(mode, best):
    records = TrialRecords(make_spec(mode))
    feed(records, "a", [0.9, 0.5, 0.7])
    row = records.trials["a"]
    assert row["best_value"] == best and row["final_value"] == 0.7


def test_repeated_reports_after_restart_keep_history_unique():
    records = TrialRecords(make_spec())
    feed(records, "a", [0.9, 0.8])
    feed(records, "a", [0.9, 0.8, 0.7])  # restarted from scratch: steps 10, 20 again
    steps = [h["step"] for h in records.history]
    assert steps == [10, 20, 30]


def test_tables_round_trip_through_parquet(tmp_path):
    records = TrialRecords(make_spec())
    feed(records, "a", [0.9, 0.5, 0.4, 0.3])
    records.end("a")
    feed(records, "b", [1.2], params={"lr": 0.1, "precision": "fp32"})
    records.end("b")
    records.start("c", {"lr": 0.001, "precision": "fp32"})
    records.end("c", errored=True, error="ValueError: boom")
    write_tables(records, SweepDir(tmp_path))

    trials = read_trials(tmp_path).set_index("trial_id")
    assert trials.loc["a", "status"] == "completed"
    assert trials.loc["b", "status"] == "stopped_by_asha"
    assert trials.loc["c", "status"] == "failed"
    assert trials.loc["c", "error"] == "ValueError: boom"
    assert trials.loc["a", "best_value"] == 0.3 and trials.loc["a", "steps"] == 40
    assert trials.loc["b", "lr"] == 0.1 and trials.loc["b", "precision"] == "fp32"
    assert trials.loc["a", "worker_s"] == 4.0
    history = read_history(tmp_path / "history.parquet")
    assert list(history.columns[:4]) == ["trial_id", "step", "epoch", "time_total_s"]
    assert "config" not in history.columns and "training_iteration" in history.columns
    assert len(history) == 5
    assert pq.read_schema(tmp_path / "trials.parquet").field("steps").type == "int64"


def test_empty_columns_keep_their_types(tmp_path):
    import pyarrow.parquet as pq

    from hpsearch.space.spec import Condition

    spec = make_spec()
    spec = type(spec)(**{**spec.__dict__, "params": spec.params + (
        FloatParam("loss_scale_init", 1.0, 2.0, when=Condition("precision", ("fp16",))),)})
    records = TrialRecords(spec)
    feed(records, "a", [0.9])
    write_tables(records, SweepDir(tmp_path))
    schema = pq.read_schema(tmp_path / "trials.parquet")
    assert str(schema.field("error").type) in ("string", "large_string")
    assert str(schema.field("loss_scale_init").type) == "double"
    assert schema.field("precision").type == schema.field("error").type


def test_resumed_records_continue_from_written_tables(tmp_path):
    records = TrialRecords(make_spec())
    feed(records, "a", [0.9, 0.5])
    write_tables(records, SweepDir(tmp_path))
    again = TrialRecords(make_spec())
    again.load(read_trials(tmp_path).to_dict("records"), read_history(tmp_path).to_dict("records"))
    feed(again, "a", [0.9, 0.5, 0.4])
    assert [h["step"] for h in again.history] == [10, 20, 30]
    assert again.trials["a"]["best_value"] == 0.4


def test_failed_table_write_raises_storage_error_and_keeps_old_file(tmp_path):
    import os

    records = TrialRecords(make_spec())
    feed(records, "a", [0.9])
    write_tables(records, SweepDir(tmp_path))
    before = (tmp_path / "trials.parquet").read_bytes()
    feed(records, "b", [0.5])
    # A directory squatting on the temporary file's name makes the write fail the way a
    # full disk does (an OSError mid-write), even as root.
    (tmp_path / f".trials.parquet.tmp-{os.getpid()}").mkdir()
    with pytest.raises(StorageError, match="intact"):
        write_tables(records, SweepDir(tmp_path))
    assert (tmp_path / "trials.parquet").read_bytes() == before
    assert len(read_trials(tmp_path)) == 1


@pytest.mark.parametrize("mode, worst", [("min", math.inf), ("max", -math.inf)])
def test_non_finite_or_missing_objective_becomes_worst_value(mode, worst):
    obj = Objective("val_loss", mode)
    assert sanitize_report({"val_loss": float("nan")}, obj)["val_loss"] == worst
    assert sanitize_report({"loss": 1.0}, obj)["val_loss"] == worst
    assert sanitize_report({"val_loss": 0.5, "checkpoint": "x"}, obj) == {"val_loss": 0.5}


@pytest.mark.parametrize("mode, kept", [("min", {"a", "b"}), ("max", {"c", "d"})])
def test_ended_trials_outside_the_best_lose_their_checkpoints(tmp_path, mode, kept):
    from hpsearch.store.retention import prune_checkpoints

    def checkpoint_dirs(root, trial_id):
        return SweepDir(root).checkpoint_dirs(trial_id)

    spec = make_spec(mode)
    spec = type(spec)(**{**spec.__dict__, "checkpoints": type(spec.checkpoints)(
        keep=2, keep_best_trials=2)})
    records = TrialRecords(spec)
    for tid, loss in [("a", 0.1), ("b", 0.2), ("c", 0.3), ("d", 0.4)]:
        feed(records, tid, [loss])
        for i in range(2):
            (tmp_path / "checkpoints" / tid / f"checkpoint_00000{i}").mkdir(parents=True)
    (tmp_path / "train" / "train-e" / "checkpoint_000000").mkdir(parents=True)
    feed(records, "e", [0.05])  # the best so far, but still running: untouched
    for tid in "abcd":
        records.end(tid)
    deleted = prune_checkpoints(records, SweepDir(tmp_path))
    assert len(deleted) == 4
    assert {t for t in "abcd" if checkpoint_dirs(tmp_path, t)} == kept
    assert checkpoint_dirs(tmp_path, "e")
    assert prune_checkpoints(records, SweepDir(tmp_path)) == []  # idempotent
    # A better trial ends: the worst of the kept ones loses its checkpoints.
    records.end("e")
    prune_checkpoints(records, SweepDir(tmp_path))
    assert len({t for t in "abcde" if checkpoint_dirs(tmp_path, t)}) == 2


def test_a_continued_trial_keeps_its_row_and_adds_only_the_reports_past_its_last(tmp_path):
    """A resumed sweep continues a trial from its checkpoint: its row is the same row, and
    a report it makes again (between its checkpoint and the tables' last write) is not
    written twice."""
    records = TrialRecords(make_spec())
    feed(records, "b", [0.9, 0.5])
    write_tables(records, SweepDir(tmp_path))
    again = TrialRecords(make_spec())
    again.load(read_trials(tmp_path).to_dict("records"), read_history(tmp_path).to_dict("records"))
    started = again.trials["b"]["started_at"]
    again.start("b", {"lr": 0.01, "precision": "bf16"})
    for step, loss in ((2, 0.5), (3, 0.4)):  # from its epoch-1 checkpoint
        again.result("b", {"step": 10 * step, "epoch": step, "val_loss": loss,
                           "time_total_s": float(step), "training_iteration": step})
    assert [h["step"] for h in again.history if h["trial_id"] == "b"] == [10, 20, 30]
    assert again.trials["b"]["started_at"] == started and again.trials["b"]["status"] == "running"
    assert again.end("b", returned=True) == "completed"  # returned by itself at epoch 3
    assert again.end("b", errored=True) == "completed"  # an ended row is final


def test_a_row_ended_from_the_study_takes_its_status_best_and_final_value():
    records = TrialRecords(make_spec())
    feed(records, "a", [0.9])  # the tables saw one report; the study saw three
    records.end_as_recorded("a", params={"lr": 0.01}, status="completed", optuna_trial=4,
                            values={1: 0.9, 2: 0.6, 4: 0.7}, final_value=0.7)
    row = records.trials["a"]
    assert (row["status"], row["final_value"], row["best_value"], row["optuna_trial"]) == (
        "completed", 0.7, 0.6, 4)
    records.end_as_recorded("new", params={"lr": 0.02, "precision": "fp32"},
                            status="stopped_by_asha", optuna_trial=5, values={1: 1.5})
    assert records.trials["new"]["final_value"] == 1.5
    assert records.trials["new"]["precision"] == "fp32" and records.best()["trial_id"] == "a"


def test_reports_the_tables_never_saw_are_recovered_from_the_study(tmp_path):
    """A driver killed after a trial ended and before the tables were written: the resume
    ends the row from the study, and the history gets the study's later reports, which
    survive a write and a read (none collapsed into another: they have no step)."""
    records = TrialRecords(make_spec())
    feed(records, "a", [0.9, 0.8])  # the tables saw epochs 1-2; the study saw 1-4
    records.end_as_recorded("a", params={"lr": 0.01}, status="completed", optuna_trial=0,
                            values={1: 0.9, 2: 0.8, 3: 0.6, 4: 0.7}, final_value=0.7)
    assert records.trials["a"]["epochs"] == 4
    write_tables(records, SweepDir(tmp_path))
    history = read_history(tmp_path)
    assert list(zip(history.epoch, history.val_loss)) == [(1, 0.9), (2, 0.8), (3, 0.6), (4, 0.7)]
    assert list(history.from_study.fillna(False)) == [False, False, True, True]
    assert history.step.isna().tolist() == [False, False, True, True]
    assert read_trials(tmp_path).set_index("trial_id").loc["a", "epochs"] == 4
    again = TrialRecords(make_spec())
    again.load(read_trials(tmp_path).to_dict("records"), history.to_dict("records"))
    write_tables(again, SweepDir(tmp_path))
    assert len(read_history(tmp_path)) == 4


def test_what_is_learnt_after_an_end_is_added_once():
    records = TrialRecords(make_spec())
    feed(records, "e", [0.9])
    records.end("e", errored=True)
    records.annotate("e", error="ValueError: x", checkpoint=None)
    records.annotate("e", error="a later guess")
    assert records.trials["e"]["error"] == "ValueError: x" and "checkpoint" not in records.trials["e"]


def test_a_trial_that_ended_before_the_crash_keeps_its_row_when_tune_replays_it(tmp_path):
    records = TrialRecords(make_spec())
    feed(records, "a", [0.9, 0.5, 0.4, 0.3])
    records.end("a")
    write_tables(records, SweepDir(tmp_path))
    before = read_trials(tmp_path).set_index("trial_id").loc["a"]
    again = TrialRecords(make_spec())
    again.load(read_trials(tmp_path).to_dict("records"), read_history(tmp_path).to_dict("records"))
    feed(again, "a", [0.3])  # Tune restarted it; the trial replays its last report
    again.end("a")
    write_tables(again, SweepDir(tmp_path))
    after = read_trials(tmp_path).set_index("trial_id").loc["a"]
    assert after.status == "completed" and after.ended_at == before.ended_at
    assert len(read_history(tmp_path)) == 4


def test_the_trial_table_reads_back_as_the_pandas_conversion_through_a_sweeps_changes(tmp_path):
    """Through starts, reports, ends, Optuna links, checkpoint pruning, a resume's reloaded
    rows (times as Timestamps) and rows that never started, every write's file reads back
    exactly as the pandas conversion of the same records, schema and metadata included."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from hpsearch.space.spec import IntParam
    from hpsearch.store.tables import trials_frame

    spec = Spec(
        name="t", trainable="digits", objective=Objective("val_loss", "min"),
        params=(FloatParam("lr", 1e-4, 1e-1, log=True), IntParam("width", 8, 64),
                CategoricalParam("precision", ("fp32", "bf16"))),
        fixed={"batch_size": 64},
        scheduler=Scheduler(type="asha", max_t=4, grace_period=1, reduction_factor=2),
    )
    rng = random.Random(0)
    records = TrialRecords(spec)
    sweep = SweepDir.of(tmp_path)
    for i in range(60):
        tid = f"{i:08x}"
        records.start(tid, {"lr": 10 ** rng.uniform(-4, -1), "width": rng.randint(8, 64),
                            "precision": rng.choice(["fp32", "bf16"])})
        records.link_optuna(tid, i)
        for e in range(1, rng.randint(0, 4) + 1):
            loss = rng.choice([rng.random(), float("nan"), float("inf")])
            records.result(tid, {"step": 10 * e, "epoch": e, "val_loss": loss,
                                 "time_total_s": 0.5 * e, "training_iteration": e})
        if rng.random() < 0.8:
            records.end(tid, errored=rng.random() < 0.2, error="boom" if i % 3 else None)
        if i % 7 == 3:  # an earlier row changes: its checkpoints pruned (retention)
            old = records.trials[f"{rng.randrange(i):08x}"]
            old["checkpoint"] = None
            records.touch(old["trial_id"])
        if i % 17 == 16 and records.unfinished():  # a resume ends a row as the study did
            tid = records.unfinished()[0]
            records.end_as_recorded(tid, params={}, status="stopped_by_asha",
                                    optuna_trial=records.trials[tid]["optuna_trial"],
                                    values={1: 0.25, 2: 0.5})
        if i == 30:  # a resume: the rows read back (times as Timestamps), a new writer
            from hpsearch.store.tables import load_tables

            rows, history = load_tables(sweep)
            records = TrialRecords(spec)
            records.load(rows, history)
        if i % 11 == 5:  # a trial the study holds that never started: no start time
            records.add_without_reports(f"never{i}", {"lr": 0.01, "width": 8,
                                                      "precision": "fp32"})
        write_tables(records, sweep)
        slow = pa.Table.from_pandas(trials_frame(records), preserve_index=False)
        written = pq.read_table(sweep.trials)
        assert written.equals(slow) and written.schema.equals(slow.schema, check_metadata=True)
        pd.testing.assert_frame_equal(read_trials(sweep), trials_frame(records))
        assert str(read_trials(sweep).started_at.dtype) == "datetime64[ns, UTC]"


def test_a_value_of_another_type_is_written_as_pandas_converts_it(tmp_path):
    from hpsearch.store.tables import trials_frame

    records = TrialRecords(make_spec())
    sweep = SweepDir.of(tmp_path)
    feed(records, "a", [0.5, 0.4])
    records.trials["a"]["error"] = 3  # pandas writes it as "3"
    records.touch("a")
    write_tables(records, sweep)
    assert read_trials(sweep).error.iloc[0] == "3" == trials_frame(records).error.iloc[0]
