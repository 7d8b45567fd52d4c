"""A killed driver's local Ray, stopped before a resume: only what it started, on this
machine since this boot, and never a pid reused by another process (real processes)."""

from __future__ import annotations

import subprocess
import sys

from hpsearch.driver.cluster.orphans import stop_orphaned_local_ray
from hpsearch.store.procs import alive as pid_alive
from hpsearch.store.procs import identify, this_machine


def _run_record(driver, local_ray, machine=None):
    return {"runs": [{"driver": driver, "local_ray": local_ray,
                      "machine": machine or this_machine()}]}


def test_orphaned_ray_daemons_of_a_dead_driver_are_stopped():
    # A stand-in daemon whose command line says "ray", as Ray's own daemons' do.
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    dead_driver = subprocess.Popen([sys.executable, "-c", "pass"])
    recorded_driver = identify(dead_driver.pid)
    dead_driver.wait()
    try:
        manifest = _run_record(recorded_driver, [identify(daemon.pid)])
        assert stop_orphaned_local_ray(manifest, grace_s=5) == [daemon.pid]
        daemon.wait(timeout=10)
        assert not pid_alive(daemon.pid)
    finally:
        daemon.kill()


def test_daemons_of_a_live_driver_are_left_alone():
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    try:
        me = identify(daemon.pid)
        assert stop_orphaned_local_ray(_run_record(me, [me])) == []
        # Nor are pids recorded on another machine (or before a reboot).
        elsewhere = _run_record({"pid": 1 << 22, "start": 1}, [me],
                                machine={"hostname": "other", "boot_id": "x"})
        assert stop_orphaned_local_ray(elsewhere) == []
        assert daemon.poll() is None
    finally:
        daemon.kill()


def test_a_reused_pid_is_never_killed():
    """The recorded pid now belongs to another process (pids are reused within a boot):
    its start time differs, so neither it nor its children are touched."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ray"])
    try:
        now = identify(other.pid)
        recorded = {"pid": other.pid, "start": now["start"] - 1}  # an earlier process
        manifest = _run_record({"pid": 1 << 22, "start": 1}, [recorded])
        assert stop_orphaned_local_ray(manifest, grace_s=1) == []
        assert other.poll() is None
    finally:
        other.kill()
