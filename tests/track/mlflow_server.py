"""A real MLflow tracking server for the tests: ``mlflow server`` on a free 127.0.0.1 port,
its runs in SQLite and its artifacts in a folder of its own.

The full ``mlflow`` package (the server and its UI) cannot share the project's venv: 3.17
pins pyarrow below the project's, and 3.18 needs an mlflow-tracing the index lacks. So
the server runs from a venv of its own: ``$HPSEARCH_TEST_MLFLOW_SERVER`` (the path of an
``mlflow`` executable) when set, else one built once under ``<repo>/.cache/mlflow-server/``
(~20 s, ~850 MB) and reused by every later session. The tests talk to it with the
client of the project's venv (``mlflow-skinny``), as hpsearch does.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

MLFLOW_VERSION = "3.17.2"
ENV_VAR = "HPSEARCH_TEST_MLFLOW_SERVER"
REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".cache" / "mlflow-server"
# Written last, once pip has succeeded: a venv without it is a build that was cut short.
_BUILT = VENV / ".built"
HEALTH_DEADLINE_S = 120.0


class MlflowServerError(pytest.fail.Exception):
    """The server could not be built or started. The test that asked for it fails with
    this message alone (no traceback), never skips: a failure to build is a failure."""

    def __init__(self, msg: str):
        super().__init__(msg, pytrace=False)


def _tail(path: Path, n: int = 20) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no output)"
    # The index here configures extra find-links folders; pip warns once per package.
    lines = [ln for ln in lines if "is neither a file nor a directory" not in ln]
    return "\n".join(lines[-n:]) or "(no output)"


def mlflow_executable() -> Path:
    """The ``mlflow`` executable that runs the server, built on first use."""
    given = os.environ.get(ENV_VAR)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise MlflowServerError(f"${ENV_VAR}={given} is not an executable file")
        return path
    exe = VENV / "bin" / "mlflow"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    # Two pytest processes (or xdist workers) must not build the same venv at once: the
    # second waits here and then finds the first one's build.
    with open(VENV.parent / "mlflow-server.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _BUILT.exists() and exe.exists():
            return exe
        shutil.rmtree(VENV, ignore_errors=True)
        log = VENV.parent / "mlflow-server-build.log"
        with open(log, "w") as out:
            ok = subprocess.run([sys.executable, "-m", "venv", str(VENV)],
                                stdout=out, stderr=subprocess.STDOUT).returncode == 0
            ok = ok and subprocess.run(
                # --no-compile: 17 s instead of 40 (the server compiles what it imports)
                [str(VENV / "bin" / "pip"), "install", "--disable-pip-version-check",
                 "--no-compile", f"mlflow=={MLFLOW_VERSION}"],
                stdout=out, stderr=subprocess.STDOUT).returncode == 0
        if not ok or not exe.exists():
            raise MlflowServerError(
                f"could not build the MLflow server's venv in {VENV} "
                f"(pip install mlflow=={MLFLOW_VERSION}; set ${ENV_VAR} to an mlflow "
                f"executable to use another). pip's last lines:\n{_tail(log)}")
        _BUILT.write_text(MLFLOW_VERSION + "\n")
        return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marked_processes(mark: str) -> list[int]:
    """Pids of the live processes whose environment carries ``mark`` (KEY=VALUE)."""
    needle = mark.encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:  # gone, or not ours to read
            continue
    return pids


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with its store in ``root``.

    ``stop()`` and ``start()`` keep the port and the store, so a test can take the server
    down mid-sweep and bring it back with its data. Every process the server starts
    (uvicorn or gunicorn workers) carries a mark in its environment, and ``stop()`` kills
    each of them, so none is left behind (``processes()`` lists those still alive)."""

    def __init__(self, root: Path, port: int | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = self.root / "server.log"
        self.mark = f"HPSEARCH_TEST_MLFLOW_SERVER_ID={uuid.uuid4().hex}"
        self._proc: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> "MlflowServer":
        if self.running:
            return self
        exe = mlflow_executable()
        key, value = self.mark.split("=", 1)
        # Job execution (huey consumers for GenAI jobs: 8 more processes, ~0.5 GB) is of
        # no use to tracking tests on a 2-core machine.
        env = {**os.environ, key: value, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        # Its venv is built without bytecode (--no-compile): the first start writes what
        # it imports, and later ones read it (~5 s a start instead of ~10).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cmd = [str(exe), "server", "--host", "127.0.0.1", "--port", str(self.port),
               "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
               "--artifacts-destination", str(self.root / "mlartifacts"),
               "--workers", "1"]
        with open(self.log, "a") as out:
            out.write(f"\n=== {' '.join(cmd)}\n")
            out.flush()
            self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True)
        deadline = time.monotonic() + HEALTH_DEADLINE_S
        while True:
            if self._proc.poll() is not None:
                self._fail(f"exited with code {self._proc.returncode} before it answered")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self._fail(f"did not answer {self.uri}/health within {HEALTH_DEADLINE_S:.0f} s")
            time.sleep(0.25)

    def _fail(self, why: str) -> None:
        self.stop()
        raise MlflowServerError(f"mlflow server {why}; its log's last lines:\n"
                                f"{_tail(self.log, 30)}")

    def processes(self) -> list[int]:
        return marked_processes(self.mark)

    def stop(self) -> None:
        """Kill the server and every process it started; return once none is left."""
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._proc.wait()
            self._proc = None
        # A worker that left the process group still carries the mark.
        deadline = time.monotonic() + 30
        while pids := self.processes():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise MlflowServerError(f"mlflow server processes {pids} outlived SIGKILL")
            time.sleep(0.1)

    def __enter__(self) -> "MlflowServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
