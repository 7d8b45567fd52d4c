"""The session's MLflow tracking server (tests/tracking/mlflow_server.py)."""

from __future__ import annotations

import pytest

from tracking.mlflow_server import MlflowServer, MlflowServerError


@pytest.fixture(scope="session")
def mlflow_server_session(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    try:
        server.start()
    except MlflowServerError as e:  # a broken build fails, in one message: never a skip
        pytest.fail(str(e), pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def mlflow_server(mlflow_server_session):
    """The session's running server: ``.uri``, ``.stop()``, ``.start()`` (same port, same
    store). Tests share its store, so each uses experiments of its own; one that left it
    stopped gets it started again for the next."""
    try:
        mlflow_server_session.start()
    except MlflowServerError as e:
        pytest.fail(str(e), pytrace=False)
    return mlflow_server_session
