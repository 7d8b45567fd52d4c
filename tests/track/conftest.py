"""The session's MLflow tracking server (tests/track/mlflow_server.py)."""

from __future__ import annotations

import pytest

from .mlflow_server import MlflowServer


@pytest.fixture(scope="session")
def mlflow_server_session(tmp_path_factory):
    # A broken build or start raises MlflowServerError: the test fails with its message.
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server")).start()
    yield server
    server.stop()


@pytest.fixture
def mlflow_server(mlflow_server_session):
    """The session's running server: ``.uri``, ``.stop()``, ``.start()`` (same port, same
    store). Tests share its store, so each uses experiments of its own; one that left it
    stopped gets it started again for the next."""
    mlflow_server_session.start()
    return mlflow_server_session
