"""Shared fixtures. Ray is heavy on 2 cores: one Ray cluster of the session serves every
in-process Ray test and the subprocess sweeps that do not test a local instance, and no
test starts a second instance while it runs (two instances on one machine break Ray
Train's placement-group cleaner)."""

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
# A sweep that stalls on resources ends itself with its diagnosis (what waits, what holds
# it) well before pytest-timeout kills the test with no more than a stack: tests' sweeps
# wait on nothing for minutes. Tests of the stall watch set their own.
os.environ.setdefault("HPSEARCH_STALL_WARN_S", "60")
os.environ.setdefault("HPSEARCH_STALL_FAIL_S", "240")


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


class _SessionCluster:
    """The session's own Ray cluster: one `ray start --head` node (2 CPUs, the dashboard
    for the state API Ray Train's placement-group cleaner uses), started on first use and
    stopped when a test needs no Ray running, or at the session's end. Starting Ray costs
    ~8 s on 2 cores; every in-process test and every subprocess sweep that does not test
    the local instance itself joins this one instead of starting its own."""

    def __init__(self):
        self.cluster = None
        self._context = None

    def start(self, home) -> "object":
        if self.cluster is None:
            from cli.cluster import ray_cluster

            stop_in_process_ray()
            self._context = ray_cluster(home, [["--num-cpus=2"]], dashboard=True)
            self.cluster = self._context.__enter__()
        return self.cluster

    def stop(self) -> None:
        stop_in_process_ray()
        if self._context is not None:
            context, self._context, cluster = self._context, None, self.cluster
            self.cluster = None
            # Killed, not stopped: `ray start --block` takes ~30 s to stop a node with a
            # dashboard on 2 cores, and no test's data lives in it.
            cluster.kill()
            context.__exit__(None, None, None)


_SESSION_CLUSTER = _SessionCluster()


def stop_in_process_ray() -> None:
    import sys

    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()


@pytest.fixture
def session_ray(tmp_path_factory, monkeypatch):
    """The session's Ray cluster (:class:`_SessionCluster`), with ``RAY_ADDRESS`` set to it
    for the test: every `hpsearch` subprocess the test starts joins it."""
    cluster = _SESSION_CLUSTER.start(tmp_path_factory.mktemp("ray-home"))
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a test cluster on loopback
    yield cluster


@pytest.fixture
def ray_instance(tmp_path_factory, monkeypatch):
    """In-process tests' Ray: this process joins the session's cluster on first use and
    stays connected until a test needs no Ray running or the session ends."""
    import ray

    from hpsearch.driver.cluster.connect import connect

    cluster = _SESSION_CLUSTER.start(tmp_path_factory.mktemp("ray-home"))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        connect(cluster.address)
    yield ray


@pytest.fixture(scope="session")
def stop_ray():
    """Stops the session's cluster (this process leaves it) and waits for its processes to
    be gone: for a fixture of a wider scope that starts a Ray instance of its own."""
    def stop() -> None:
        _SESSION_CLUSTER.stop()
        _wait_for_no_ray_processes()
    return stop


@pytest.fixture
def no_ray_running(stop_ray):
    """For tests that test hpsearch's own local instance, or start a cluster of their own:
    no Ray of this session runs when they start."""
    stop_ray()
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
    _SESSION_CLUSTER.stop()
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
    """Every test that starts Ray is slow too: ``pytest -m "not slow"`` starts no Ray.

    The order: tests without Ray first, then those on the session's cluster, then those
    that need no Ray running (their own local instance or cluster), so that the session's
    cluster starts once (file order is kept within each group).

    Under pytest-xdist (``-n 2``, the default addopts), one worker runs every Ray test, in
    this order, while the other runs the tests without Ray (:func:`_ray_tests_together`)."""
    unmarked = [item.nodeid for item in items
                if item.get_closest_marker("ray") and not item.get_closest_marker("slow")]
    if unmarked:
        raise pytest.UsageError("marked ray but not slow: " + ", ".join(unmarked))

    def group(item) -> int:
        fixtures = getattr(item, "fixturenames", ())
        if "session_ray" in fixtures or "ray_instance" in fixtures:
            return 1
        return 2 if item.get_closest_marker("ray") else 0

    items.sort(key=group)  # stable
    folder = getattr(config, "workerinput", {}).get(_RAY_IDS)
    if folder:  # an xdist worker: tell the controller's scheduler which tests start Ray
        path = os.path.join(folder, config.workerinput["workerid"])
        with open(path + ".part", "w") as f:
            f.write("\n".join(item.nodeid for item in items if group(item)))
        os.replace(path + ".part", path)


_RAY_IDS = "hpsearch_ray_test_ids"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist's controller, for each worker: the folder the worker lists its Ray tests in."""
    import tempfile

    if not hasattr(node.config, "_hpsearch_ray_ids"):
        node.config._hpsearch_ray_ids = tempfile.mkdtemp(prefix="hpsearch-ray-tests-")
    node.workerinput[_RAY_IDS] = node.config._hpsearch_ray_ids


def pytest_unconfigure(config):
    """The controller removes the folder of Ray test lists it made (a worker xdist restarts
    after a crash lists its tests again, so it lives as long as the session)."""
    import shutil

    folder = getattr(config, "_hpsearch_ray_ids", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return _ray_tests_together()(config, log)


def _ray_tests_together():
    from xdist.scheduler import LoadScopeScheduling

    class RayTestsTogether(LoadScopeScheduling):
        """One scope of every Ray test (the workers list them: xdist's own ``loadgroup``
        renames node ids, which pytest 9 ignores), and one per other test. The Ray scope,
        the largest, goes to a worker first and runs in collection order: one Ray instance
        at a time, as without xdist. The Ray tests leave the CPUs idle about half the time
        (trials starting, drivers killed and resumed, deadlines); the other worker runs
        the tests without Ray meanwhile."""

        ray_ids: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.ray_ids is None:  # asked once every worker has collected and listed
                folder = self.config._hpsearch_ray_ids
                ids: set[str] = set()
                for name in os.listdir(folder):
                    if not name.endswith(".part"):
                        with open(os.path.join(folder, name)) as f:
                            ids.update(f.read().split("\n"))
                self.ray_ids = frozenset(ids - {""})
            return "ray" if nodeid in self.ray_ids else nodeid

    return RayTestsTogether


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that fails while the session's cluster runs gets the cluster's state in its
    report (resources, live actors, placement groups): a sweep that hung in CI otherwise
    leaves only the driver's stack, waiting in Tune's loop, and no clue what it waited for."""
    report = yield
    cluster = _SESSION_CLUSTER.cluster
    if report.when == "call" and report.failed and cluster is not None:
        report.sections.append(("Ray cluster after the failure", _cluster_state(cluster)))
    return report


def _cluster_state(cluster) -> str:
    import sys

    ray = os.path.join(os.path.dirname(sys.executable), "ray")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    api = f"http://127.0.0.1:{cluster.dashboard_port}"
    out = []
    for args in (["status", f"--address={cluster.address}"],
                 ["list", "actors", "--filter", "state!=DEAD", f"--address={api}"],
                 ["list", "placement-groups", f"--address={api}"]):
        try:
            done = subprocess.run([ray, *args], env=env, capture_output=True, text=True,
                                  timeout=60)
            out.append(f"$ ray {' '.join(args)}\n{done.stdout}{done.stderr}")
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append(f"$ ray {' '.join(args)}\n{e}")
    return "\n".join(out)
