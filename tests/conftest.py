"""Shared fixtures. Ray is heavy on 2 cores: one Ray instance serves every in-process Ray
test, and no test starts a second one while it runs (two instances on one machine break
Ray Train's placement-group cleaner)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest


# Every process this test session starts, and every process those start (Ray's daemons
# included), inherits this variable: it tells our Ray processes from anyone else's on a
# shared machine.
_SESSION_MARK = f"HPSEARCH_TEST_SESSION={uuid.uuid4().hex}"
os.environ["HPSEARCH_TEST_SESSION"] = _SESSION_MARK.split("=", 1)[1]
# Without an address, hpsearch (like ray.init) joins a `ray start` cluster running on this
# machine. Tests never join a cluster they did not start: theirs is a local instance of
# their own, or one that tests/cli/cluster.py starts and names with --address.
os.environ["RAY_ADDRESS"] = "local"


def _ours(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return _SESSION_MARK.encode() in f.read().split(b"\0")
    except OSError:  # gone, or not readable: not ours
        return False


def ray_processes() -> list[str]:
    """Ray daemons (raylet, GCS, dashboard, workers) this test session started."""
    out = subprocess.run(["pgrep", "-af", "raylet|gcs_server|ray::|dashboard.py"],
                         capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln and _ours(ln.split()[0])]


@pytest.fixture(autouse=True)
def sigint_left_as_it_was():
    """Ctrl-C must still stop the test session (and a user's notebook or script after a
    sweep or trial in-process): no test, and no hpsearch code it runs, leaves a SIGINT
    handler of its own behind. Ray Tune installs one while it runs and Ray Train's
    ``TorchTrainer.fit`` in the main thread installs one that it never takes back."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after != before:  # == not is: bound methods
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"the test left a SIGINT handler behind: {after!r} (was {before!r})")


@pytest.fixture
def ray_instance():
    """The local Ray instance of the in-process tests, started through hpsearch itself on
    first use and shared by every test that asks for it until a test that needs Ray
    stopped (``no_ray_running``, a cluster of its own) or the session's end shuts it down:
    starting Ray costs seconds on 2 cores."""
    import ray

    from hpsearch.driver.cluster.connect import connect

    if not ray.is_initialized():
        connect(None)
    yield ray


@pytest.fixture
def no_ray_running():
    """For tests that run `hpsearch` in a subprocess, or start a cluster of their own: the
    shared in-process instance is shut down first, and its processes gone."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    _wait_for_no_ray_processes()
    yield


@pytest.fixture
def leftover_ray():
    """Call it to get the Ray processes still alive (after waiting up to 30 s)."""
    return _wait_for_no_ray_processes


def _wait_for_no_ray_processes(timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    left = ray_processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = ray_processes()
    return left


@pytest.fixture(scope="session", autouse=True)
def no_ray_left_behind():
    """After the whole session: no Ray process of ours may survive."""
    yield
    import sys

    if "ray" in sys.modules:
        sys.modules["ray"].shutdown()
    left = _wait_for_no_ray_processes()
    assert not left, "Ray processes left after the tests:\n" + "\n".join(left)


@pytest.fixture
def one_torch_thread():
    """Reports must be bit-for-bit repeatable, and tests share 2 cores with other work."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_collection_modifyitems(config, items):
    """Every test that starts Ray is slow too: ``pytest -m "not slow"`` starts no Ray."""
    unmarked = [item.nodeid for item in items
                if item.get_closest_marker("ray") and not item.get_closest_marker("slow")]
    if unmarked:
        raise pytest.UsageError("marked ray but not slow: " + ", ".join(unmarked))
