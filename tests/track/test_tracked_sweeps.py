"""Sweeps written to a real MLflow server and to TensorBoard while they run (issue 37):
live, through the server going away and coming back, through a driver SIGKILL and
`hpsearch resume`, and exported afterwards. Each sweep is `hpsearch run` in a subprocess
on the session's Ray cluster; the server is `mlflow server` on loopback
(:mod:`.mlflow_server`), read back with MLflow's own client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

import hpsearch

from .mlflow_check import assert_mlflow_matches_tables, curve_steps, runs_of, trial_runs

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPACE = """\
    name: tracked
    trainable: digits
    objective: {{metric: val_loss, mode: min}}
    params:
      lr: {{type: float, low: 1.0e-3, high: 3.0e-2, log: true}}
      batch_size: 4
      log_every: 100
    search: {{algorithm: tpe, seed: 3, n_startup_trials: 3}}
    scheduler: {{type: asha, time_attr: epoch, max_t: 6, grace_period: 1, reduction_factor: 3}}
    trials: {{num: {trials}, max_concurrent: 2}}
    resources: {{workers: 1}}
    track:
      mlflow: {{tracking_uri: '{uri}', experiment: {experiment}}}
      tensorboard: true
"""


def start(tmp_path: Path, uri: str, *, trials: int, experiment: str, command: str = "run",
          args: tuple = ()) -> subprocess.Popen:
    space = tmp_path / "tracked.yaml"
    space.write_text(textwrap.dedent(SPACE.format(uri=uri, trials=trials,
                                                  experiment=experiment)))
    target = str(space) if command == "run" else "tracked"
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch", command, target, *args], cwd=tmp_path,
        stdout=open(tmp_path / f"{command}.out", "w"), stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})


def wait_until(predicate, *, process: subprocess.Popen | None = None, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError("the sweep ended before the moment the test waits for")
        time.sleep(0.2)
    raise AssertionError("condition not reached in time")


def reports_in_tables(sweep: Path) -> int:
    try:
        return len(hpsearch.read_history(sweep))
    except Exception:  # noqa: BLE001 - not written yet
        return 0


def unfinished_trials(sweep: Path) -> set[str]:
    """Trial ids the study journal holds as RUNNING (read while the driver writes it)."""
    try:
        study = optuna.load_study(study_name="tracked", storage=JournalStorage(
            JournalFileBackend(str(sweep / "optuna.journal"))))
        return {t.user_attrs["trial_id"] for t in study.trials
                if t.state.name == "RUNNING" and "trial_id" in t.user_attrs}
    except Exception:  # noqa: BLE001 - not created yet, or a line half written
        return set()


def unfinished_with_curve(sweep: Path, uri: str, experiment: str) -> bool:
    """A trial the study still holds as running already has points of its curve in MLflow:
    the moment to kill the driver so that the resume must take up an existing run."""
    from mlflow.tracking import MlflowClient

    unfinished = unfinished_trials(sweep)
    if not unfinished:
        return False
    client = MlflowClient(uri)
    runs = trial_runs(uri, experiment)
    return any(client.get_metric_history(run.info.run_id, "val_loss")
               for tid in unfinished for run in runs.get(tid, []))


def curve_while_running(uri: str, experiment: str) -> bool:
    """A trial's run is RUNNING and already has points of its curve: written live."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    for runs in trial_runs(uri, experiment).values():
        for run in runs:
            if run.info.status == "RUNNING" and client.get_metric_history(run.info.run_id,
                                                                          "val_loss"):
                return True
    return False


def test_a_tracked_sweep_is_live_outlasts_the_server_going_away_and_exports(
        tmp_path, session_ray, mlflow_server):
    sweep = tmp_path / "runs" / "tracked"
    run = start(tmp_path, mlflow_server.uri, trials=5, experiment="live")
    try:
        wait_until(lambda: curve_while_running(mlflow_server.uri, "live"), process=run)
        mlflow_server.stop()  # mid-sweep: reports go on arriving while it is away
        down_at = reports_in_tables(sweep)
        wait_until(lambda: reports_in_tables(sweep) > down_at or run.poll() is not None)
        mlflow_server.start()
        assert run.wait(timeout=600) == 0, (tmp_path / "run.out").read_text()
    finally:
        run.kill()
    out = (tmp_path / "run.out").read_text()
    assert out.count("does not answer") == 1, out  # one line for the whole outage
    assert "Traceback" not in out, out
    trials = hpsearch.read_trials(sweep)
    assert len(trials) == 5 and set(trials.status) <= {"completed", "stopped_by_asha"}

    # Caught up live, or by the export the last line names; either way, whole.
    export = subprocess.run([sys.executable, "-m", "hpsearch", "export", "tracked"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stdout + export.stderr
    assert_mlflow_matches_tables(mlflow_server.uri, "live", sweep, "val_loss")
    history = hpsearch.read_history(sweep)
    assert (~history.evaluated).any()  # log_every rows: training loss between reports
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server.uri)
    (sweep_run,) = [r for r in runs_of(mlflow_server.uri, "live")
                    if r.data.tags.get("hpsearch.kind") == "sweep"]
    assert sweep_run.info.status == "FINISHED"
    assert sweep_run.data.tags["hpsearch.status"] == "finished"
    assert sweep_run.data.params["batch_size"] == "4"
    best = trials.sort_values("best_value").trial_id.iloc[0]
    assert sweep_run.data.tags["hpsearch.best_trial"] == best
    assert sweep_run.data.metrics["val_loss"] == trials.best_value.min()
    assert sweep_run.data.tags["mlflow.source.name"] == "hpsearch"
    names = {f.path for f in client.list_artifacts(sweep_run.info.run_id)}
    assert {"space.yaml", "manifest.json"} <= names

    # An old sweep into an empty experiment, twice: the second adds nothing.
    for i, new in enumerate(("", "(0 new)")):
        again = subprocess.run(
            [sys.executable, "-m", "hpsearch", "export", "tracked", "--mlflow",
             mlflow_server.uri, "--experiment", "after", "--tensorboard",
             str(tmp_path / "tb-export")], cwd=tmp_path, capture_output=True, text=True,
            timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert new in again.stdout, again.stdout
    assert_mlflow_matches_tables(mlflow_server.uri, "after", sweep, "val_loss")

    # TensorBoard: a folder per trial, each report's value once.
    from .tensorboard_check import scalar_steps

    for trial_id, rows in history[history.val_loss.notna()].groupby("trial_id"):
        for root in (sweep / "tensorboard", tmp_path / "tb-export"):
            assert scalar_steps(root / trial_id, "val_loss") == sorted(curve_steps(rows))


def test_a_killed_tracked_sweep_resumes_into_the_same_runs(tmp_path, session_ray,
                                                          mlflow_server):
    """SIGKILL of the driver while a trial's run has part of its curve, then `hpsearch
    resume`: every trial still has exactly one run, whose curve has each step once."""
    sweep = tmp_path / "runs" / "tracked"
    run = start(tmp_path, mlflow_server.uri, trials=4, experiment="killed")
    try:
        # Kill once a trial still running in the study has part of its curve in MLflow
        # (MLflow runs lag the study, and the tables lag both: the study is what is read).
        wait_until(lambda: unfinished_with_curve(sweep, mlflow_server.uri, "killed"),
                   process=run)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
    finally:
        run.kill()
    # The kill left a trial unfinished in the study with a run in MLflow (RUNNING), which
    # the resume must take up again rather than make a second one.
    unfinished = unfinished_trials(sweep)
    before = trial_runs(mlflow_server.uri, "killed")
    assert any(tid in before for tid in unfinished), (unfinished, before)
    resume = start(tmp_path, mlflow_server.uri, trials=4, experiment="killed",
                   command="resume")
    assert resume.wait(timeout=600) == 0, (tmp_path / "resume.out").read_text()
    assert_mlflow_matches_tables(mlflow_server.uri, "killed", sweep, "val_loss")
