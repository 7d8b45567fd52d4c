"""The test MLflow server itself: a run logged through MLflow's client survives the
server's stop and start on the same port, and no server process outlives the context."""

from __future__ import annotations

import pytest

mlflow = pytest.importorskip("mlflow")
from mlflow.entities import Metric, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from .mlflow_server import MlflowServer  # noqa: E402


# ~5 s per start on 2 cores, but ~45 s on a machine's first run, which builds the server's venv.
@pytest.mark.slow
def test_runs_survive_a_restart_and_no_process_is_left(tmp_path, monkeypatch):
    # Fail fast while the server is down instead of retrying for minutes.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with MlflowServer(tmp_path / "mlflow") as server:
        assert server.processes(), "the server's processes should carry its mark"
        client = MlflowClient(server.uri)
        exp = client.create_experiment("restart")
        parent = client.create_run(exp, run_name="sweep")
        child = client.create_run(exp, run_name="trial",
                                  tags={"mlflow.parentRunId": parent.info.run_id})
        child_id = child.info.run_id
        client.log_batch(child_id,
                         metrics=[Metric("loss", 1.0 / (s + 1), 0, s) for s in range(5)],
                         tags=[RunTag("hpsearch.trial_id", "t0")])
        client.set_terminated(child_id, status="KILLED")

        server.stop()
        assert not server.processes()
        with pytest.raises(Exception):
            client.get_run(child_id)
        server.start()

        run = client.get_run(child_id)
        assert run.info.status == "KILLED"
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["hpsearch.trial_id"] == "t0"
        history = client.get_metric_history(child_id, "loss")
        assert [(m.step, m.value) for m in history] == [(s, 1.0 / (s + 1)) for s in range(5)]
        pids = server.processes()
        assert pids
    assert not server.processes()
    assert not server.running


@pytest.mark.slow
def test_the_session_fixture_restarts_on_its_port_with_its_store(mlflow_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    client = MlflowClient(mlflow_server.uri)
    exp = client.create_experiment("fixture-restart")
    mlflow_server.stop()
    assert not mlflow_server.processes()
    mlflow_server.start()
    assert client.get_experiment(exp).name == "fixture-restart"
