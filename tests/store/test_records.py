"""How a trial's row ends, and what the live status line estimates (no Ray)."""

from __future__ import annotations

import math

import pytest

from hpsearch.space.spec import FloatParam, Objective, Scheduler, Spec, Trials
from hpsearch.store.records import TrialRecords
from hpsearch.store.reports import OBJECTIVE_MISSING, sanitize_report
from hpsearch.store.summary import estimate_remaining, printable


def make_spec(scheduler="asha", metric="val_mse"):
    return Spec(
        name="t", trainable="rawloop:train", objective=Objective(metric, "min"),
        params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
        scheduler=Scheduler(type=scheduler, max_t=4, grace_period=1, reduction_factor=2),
        trials=Trials(num=10),
    )


def report(records, tid, epochs, *, with_objective=True):
    obj = records.spec.objective
    for e in range(1, epochs + 1):
        metrics = {"epoch": e, "loss": 1.0 / e}
        if with_objective:
            metrics[obj.metric] = 1.0 / e
        records.result(tid, {**sanitize_report(metrics, obj), "training_iteration": e})


@pytest.mark.parametrize("scheduler", ["fifo", "asha"])
def test_a_raw_loop_that_returns_before_max_t_is_completed_not_failed(scheduler):
    records = TrialRecords(make_spec(scheduler))
    records.start("a", {"lr": 0.01})
    report(records, "a", 3)  # max_t is 4: it stopped on its own
    records.end("a", returned=True)
    assert records.trials["a"]["status"] == "completed"


def test_a_trial_asha_stopped_is_stopped_by_asha():
    records = TrialRecords(make_spec("asha"))
    records.start("a", {"lr": 0.01})
    report(records, "a", 1)
    records.stopped_by_scheduler("a")
    records.end("a", returned=True)
    assert records.trials["a"]["status"] == "stopped_by_asha"


def test_a_trial_that_never_reported_its_objective_failed_and_says_what_it_reported():
    records = TrialRecords(make_spec("fifo"))
    records.start("a", {"lr": 0.01})
    report(records, "a", 4, with_objective=False)
    records.end("a", returned=True)
    row = records.trials["a"]
    assert row["status"] == "failed"
    assert "never reported the objective metric 'val_mse'" in row["error"]
    assert "it reported: loss" in row["error"]
    # The marker is bookkeeping: it never becomes a history column.
    assert all(OBJECTIVE_MISSING not in h for h in records.history)


def test_a_trial_that_returned_without_any_report_failed():
    records = TrialRecords(make_spec("fifo"))
    records.start("a", {"lr": 0.01})
    records.end("a", returned=True)
    assert records.trials["a"]["status"] == "failed"
    assert "it reported: none" in records.trials["a"]["error"]


def test_an_ended_row_is_final():
    records = TrialRecords(make_spec("fifo"))
    records.start("a", {"lr": 0.01})
    report(records, "a", 4)
    records.end("a", returned=True)
    before = dict(records.trials["a"])
    records.start("a", {"lr": 0.5})
    report(records, "a", 2)
    records.end("a", errored=True, error="boom")
    assert records.trials["a"] == before


def test_the_estimate_counts_down_between_trial_ends_and_never_grows():
    # 4 of 10 trials ended, the last one 100 s into the sweep: 25 s a trial, 150 s to go.
    etas = [estimate_remaining(ended=4, planned=10, last_end_at=100.0, elapsed=t)
            for t in (100.0, 150.0, 200.0, 249.0)]
    assert etas == [150.0, 100.0, 50.0, 1.0]
    assert estimate_remaining(ended=4, planned=10, last_end_at=100.0, elapsed=400.0) is None
    assert estimate_remaining(ended=0, planned=10, last_end_at=None, elapsed=500.0) is None
    # A time budget caps it.
    assert estimate_remaining(ended=4, planned=10, last_end_at=100.0, elapsed=150.0,
                              budget_s=160.0) == 10.0


def test_printed_user_strings_have_their_control_characters_escaped():
    assert printable("fp16\x1b[31m!\r") == "fp16\\x1b[31m!\\r"
    assert printable("lr=0.01, précision") == "lr=0.01, précision"
    assert math.isnan(float(printable(float("nan"))))


def test_log_every_rows_join_the_history_between_reports_and_never_rank_the_trial():
    records = TrialRecords(make_spec("fifo"))
    records.start("a", {"lr": 0.01})
    log = [{"step": 5, "epoch": 0.5, "train_loss": 0.01, "lr": 1e-3, "age_s": 3.0},
           {"step": 8, "epoch": 0.8, "train_loss": 0.02, "lr": 1e-3, "age_s": 1.0}]
    records.result("a", {"step": 10, "epoch": 1, "val_mse": 0.5, "train_loss": 0.9,
                         "time_total_s": 10.0, "train_log": log})
    records.result("a", {"step": 20, "epoch": 2, "val_mse": 0.7, "time_total_s": 20.0})
    rows = records.history
    assert [(r["step"], r["evaluated"]) for r in rows] == [(5, False), (8, False), (10, True),
                                                           (20, True)]
    assert [r["time_total_s"] for r in rows] == [7.0, 9.0, 10.0, 20.0]
    assert "train_log" not in rows[2] and "val_mse" not in rows[0]
    row = records.trials["a"]
    assert (row["best_value"], row["best_step"], row["final_value"]) == (0.5, 10, 0.7)
    # A resumed sweep's last report is the last evaluation, whatever the log rows say.
    again = TrialRecords(make_spec("fifo"))
    again.load([{"trial_id": "a", "status": "running"}], rows[:3] + [dict(rows[0], step=12)])
    assert again.trials["a"]["last"]["step"] == 10
    # A repeated report (a restarted trial) adds nothing; a log row and a report may share a step.
    records.result("a", {"step": 20, "epoch": 2, "val_mse": 0.7, "time_total_s": 20.0,
                         "train_log": [{"step": 20, "epoch": 2, "train_loss": 0.3, "age_s": 0}]})
    assert [(r["step"], r["evaluated"]) for r in records.history][-2:] == [(20, True), (20, False)]


def test_startup_is_start_to_first_step_and_a_restart_keeps_the_first_attempts():
    records = TrialRecords(make_spec())
    records.start("a", {"lr": 0.01})
    started = records.trials["a"]["started_at"]
    records.result("a", {"val_mse": 1.0, "step": 1, "epoch": 1, "first_step_at": started + 2.5})
    records.result("a", {"val_mse": 0.9, "step": 2, "epoch": 2, "first_step_at": started + 40})
    assert records.trials["a"]["startup_s"] == pytest.approx(2.5)
    assert all("first_step_at" not in row for row in records.history)  # not a metric
    records.start("b", {"lr": 0.01})
    report(records, "b", 1)  # a raw loop: no first step marked
    assert "startup_s" not in records.trials["b"]


def test_startup_is_computed_from_a_start_time_read_back_from_the_table():
    # A resumed sweep's rows come from trials.parquet, where times are timestamps; the
    # first report after the resume computes startup_s from started_at (a power-cut run
    # died here with "float() argument must be ... not 'Timestamp'").
    import pandas as pd

    records = TrialRecords(make_spec())
    records.load([{"trial_id": "a", "status": "running",
                   "started_at": pd.Timestamp(1_000_000_000, unit="s", tz="UTC"),
                   "ended_at": pd.NaT}], [])
    row = records.trials["a"]
    assert "ended_at" not in row  # NaT is a missing value, like NaN
    records.result("a", {"val_mse": 1.0, "step": 1, "epoch": 1,
                         "first_step_at": 1_000_000_002.5})
    assert row["startup_s"] == pytest.approx(2.5)


def test_the_typed_row_names_every_trial_table_column_it_holds():
    """:class:`TrialRow` types each column of ``trials.parquet`` a row holds (``worker_s`` and
    ``gpu_s`` are derived from ``wall_s`` when the table is written)."""
    from hpsearch.space.spec import TRIAL_COLUMNS
    from hpsearch.store.records import TrialRow

    assert set(TRIAL_COLUMNS) - {"worker_s", "gpu_s"} <= set(TrialRow.__annotations__)
