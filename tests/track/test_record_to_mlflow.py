"""A sweep's record followed into a real MLflow server by :class:`hpsearch.track.Tracking`
(no Ray: the record's verbs are called as Tune's events would call them): the server going
away costs one line and nothing sent, a resume's new tracker continues the same runs, and
the command line refuses a server it cannot reach before anything starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from hpsearch.driver.record.sweep_record import SweepRecord
from hpsearch.space import parse_space
from hpsearch.track import Tracking
from hpsearch.track.mlflow_runs import MlflowTracker

from .mlflow_check import trial_runs

SPACE = {"name": "rec", "trainable": "digits", "objective": {"metric": "val_loss", "mode": "min"},
         "params": {"lr": {"type": "float", "low": 1e-3, "high": 0.1, "log": True}},
         "scheduler": {"type": "fifo", "time_attr": "epoch", "max_t": 8}}


def report(epoch: int) -> dict:
    return {"val_loss": 1.0 / epoch, "epoch": epoch, "step": 10 * epoch,
            "training_iteration": epoch, "time_total_s": 0.1 * epoch}


def wait_for(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def curve(uri: str, experiment: str, trial_id: str) -> list[int]:
    from mlflow.tracking import MlflowClient

    runs = trial_runs(uri, experiment).get(trial_id)
    if not runs:
        return []
    (run,) = runs
    return sorted(m.step for m in MlflowClient(uri).get_metric_history(run.info.run_id,
                                                                        "val_loss"))


def test_a_server_away_mid_trial_costs_one_line_and_nothing_sent(mlflow_server):
    spec = parse_space(SPACE)
    record = SweepRecord.in_memory(spec)
    record.open_study(directions=["minimize"])
    lines: list[str] = []
    tracker = MlflowTracker(mlflow_server.uri, "away")
    tracker.check()
    record.observe(Tracking([tracker], say=lines.append, drain_s=60))
    record.ask("t1", lambda trial: {"lr": 0.01})
    record.start("t1", {"lr": 0.01})
    for epoch in (1, 2, 3):
        record.report("t1", report(epoch))
    wait_for(lambda: curve(mlflow_server.uri, "away", "t1") == [10, 20, 30])

    mlflow_server.stop()
    for epoch in (4, 5, 6):  # the driver goes on: nothing here waits for the server
        started = time.monotonic()
        record.report("t1", report(epoch))
        assert time.monotonic() - started < 1.0
    wait_for(lambda: any("does not answer" in line for line in lines))
    mlflow_server.start()
    for epoch in (7, 8):
        record.report("t1", report(epoch))
    record.end("t1", returned=True)
    record.close("finished")

    assert [ln for ln in lines if "does not answer" in ln] == lines[:1], lines
    assert any("answers again" in line for line in lines), lines
    assert curve(mlflow_server.uri, "away", "t1") == [10 * e for e in range(1, 9)]
    (run,) = trial_runs(mlflow_server.uri, "away")["t1"]
    assert run.info.status == "FINISHED" and run.data.tags["hpsearch.last_step"] == "80"


def test_a_new_tracker_continues_each_run_where_it_stopped(mlflow_server):
    """A resume builds a new tracker from the history as the resume rebuilt it, which is
    not what the killed driver sent: the tables lag (they hold epoch 1 of the 3 sent), the
    study gives back only its own steps (``from_study`` rows: epoch 3, no step), the
    newest checkpoint adds epoch 4, and the trial, restarted from an older checkpoint,
    reports epoch 4 again. Each step reaches the run once, in place, with no gap; the same
    run is taken up (RUNNING again), never a second one; and a run the killed driver made
    before its parameters went out gets them."""
    from mlflow.tracking import MlflowClient

    spec = parse_space(SPACE)
    first = SweepRecord.in_memory(spec)
    first.open_study(directions=["minimize"])
    first.observe(Tracking([MlflowTracker(mlflow_server.uri, "again")], say=print))
    first.ask("t1", lambda trial: {"lr": 0.02})
    first.start("t1", {"lr": 0.02})
    for epoch in (1, 2, 3):
        first.report("t1", report(epoch))
    first.close("interrupted")  # Ctrl-C: the trial's run is KILLED until the resume
    (run,) = trial_runs(mlflow_server.uri, "again")["t1"]
    assert run.info.status == "KILLED" and run.data.tags["hpsearch.last_step"] == "30"
    client = MlflowClient(mlflow_server.uri)
    bare = client.create_run(run.info.experiment_id, run_name="t2", tags={  # killed between
        "hpsearch.sweep_id": "rec", "hpsearch.trial_id": "t2",  # making t2's run and
        "mlflow.parentRunId": run.data.tags["mlflow.parentRunId"]}).info.run_id  # logging

    second = SweepRecord.in_memory(spec)  # what a resume reads back and recovers
    t2 = {"trial_id": "t2", "lr": 0.05, "status": "running"}
    second.rows.load([dict(first.rows.trials["t1"], status="running"), t2], [
        first.rows.history[0],
        {"trial_id": "t1", "epoch": 3, "val_loss": 1 / 3, "evaluated": True, "from_study": True},
        {"trial_id": "t1", **report(4), "evaluated": True}])
    second.open_study(directions=["minimize"])
    second.observe(Tracking([MlflowTracker(mlflow_server.uri, "again")], say=print))
    second.start("t1", {"lr": 0.02})
    for epoch in (4, 5):  # restarted from epoch 3's checkpoint: 4 comes again
        second.report("t1", dict(report(epoch), val_loss=0.9 / epoch))
    second.close("interrupted")
    runs = trial_runs(mlflow_server.uri, "again")
    (run,) = runs["t1"]
    history = client.get_metric_history(run.info.run_id, "val_loss")
    assert sorted((m.step, m.value) for m in history) == [
        (10, 1.0), (20, 0.5), (30, 1 / 3), (40, 0.25), (50, 0.9 / 5)]
    assert run.data.tags["hpsearch.last_step"] == "50"
    assert [r.info.run_id for r in runs["t2"]] == [bare]
    assert client.get_run(bare).data.params == {"lr": "0.05"}


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_server_that_does_not_answer_is_one_line_before_anything_starts(tmp_path, command):
    space = tmp_path / "space.yaml"
    space.write_text(textwrap.dedent("""\
        trainable: digits
        objective: {metric: val_loss, mode: min}
        params: {lr: {type: float, low: 1.0e-3, high: 0.1, log: true}}
        track: {mlflow: {tracking_uri: 'http://127.0.0.1:9'}}
    """))
    args = ["--check-track"] if command == "validate" else []
    out = subprocess.run([sys.executable, "-m", "hpsearch", command, str(space), *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "cannot reach MLflow at http://127.0.0.1:9: connection refused" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # no sweep was made, no Ray was started


def test_a_run_an_earlier_hpsearch_counted_is_continued_not_sent_again(mlflow_server):
    """A run made before the marks held ``hpsearch.rows_sent`` (how many history rows it
    had): a sync sends only the rows past that count."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from hpsearch.track import SweepFacts

    client = MlflowClient(mlflow_server.uri)
    experiment = client.create_experiment("counted")
    run = client.create_run(experiment, run_name="t1", tags={
        "hpsearch.sweep_id": "old", "hpsearch.trial_id": "t1", "hpsearch.rows_sent": "2"})
    run_id = run.info.run_id
    client.log_batch(run_id, metrics=[Metric("val_loss", 1.0 / e, 0, 10 * e) for e in (1, 2)])
    rows = [{"trial_id": "t1", **report(e), "evaluated": True} for e in (1, 2, 3)]
    facts = SweepFacts(name="old", path="", params=("lr",),
                       objectives=(("val_loss", "min"),), time_attr="epoch")
    for _ in range(2):  # the second sync adds nothing
        tracker = MlflowTracker(mlflow_server.uri, "counted")
        tracker.sync(facts, [{"trial_id": "t1", "lr": 0.01, "status": "running"}], rows)
    assert curve(mlflow_server.uri, "counted", "t1") == [10, 20, 30]
    assert client.get_run(run_id).data.tags["hpsearch.last_step"] == "30"
