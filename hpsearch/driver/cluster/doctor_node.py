"""What ``hpsearch doctor`` asks each node: the functions here run as Ray tasks on the
node (and :func:`torch_facts` in a fresh Python process there) and return plain data for
:mod:`hpsearch.driver.cluster.doctor_rules` to judge. Nothing is changed on a node except a
marker file in the storage, written, read and removed by :mod:`hpsearch.driver.cluster.doctor`.

Test-only: a node whose Ray was started with ``HPSEARCH_TEST_NODE_STORAGE=DIR`` checks
``DIR`` in place of the storage it is given. That is how a test on one machine makes one
node's storage a different directory (a node where the shared mount is missing) or an
unwritable one.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

__all__ = ["MARKER_PREFIX", "TEST_NODE_STORAGE_ENV", "auth_facts", "node_facts", "now",
           "read_marker", "remove_marker", "storage_facts", "torch_facts", "write_marker"]

#: Test-only: on a node whose Ray processes have it, the storage checked there.
TEST_NODE_STORAGE_ENV = "HPSEARCH_TEST_NODE_STORAGE"
#: Files the doctor writes to a storage (and removes) start with this.
MARKER_PREFIX = ".hpsearch-doctor-"
_NCCL_ENV = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE",
             "NCCL_DEBUG")
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


def node_facts(storage: str | None, *, probe_timeout_s: float = 90.0) -> dict[str, Any]:
    """What this node has (runs as a Ray task on the node). Plain data, for
    :func:`~hpsearch.driver.cluster.doctor_rules.diagnose`."""
    import socket

    import ray

    import hpsearch

    return {
        "host": socket.gethostname(),
        "ip": ray.util.get_node_ip_address(),
        "python": platform.python_version(),
        "ray": ray.__version__,
        "hpsearch": hpsearch.__version__,
        "torch": _probe_torch(probe_timeout_s),
        "nvidia": _nvidia_driver(),
        "net": _network(ray.util.get_node_ip_address()),
        "storage": storage_facts(os.environ.get(TEST_NODE_STORAGE_ENV) or storage)
        if storage else None,
        "storage_overridden": bool(storage and os.environ.get(TEST_NODE_STORAGE_ENV)),
        "auth": auth_facts(),
    }


def torch_facts() -> dict[str, Any]:
    """torch, CUDA and NCCL as a fresh process sees them (:func:`_probe_torch` runs this in
    one, so that a hanging or crashing CUDA driver cannot take the Ray worker with it)."""
    import torch
    import torch.distributed as dist

    out: dict[str, Any] = {"version": torch.__version__, "cuda_build": torch.version.cuda,
                           "cuda": False, "devices": [], "nccl": None, "nccl_version": None,
                           "error": None}
    try:
        out["cuda"] = bool(torch.cuda.is_available())
        if out["cuda"]:
            out["devices"] = [torch.cuda.get_device_name(i)
                              for i in range(torch.cuda.device_count())]
    except Exception as exc:  # noqa: BLE001 - a broken driver raises instead of saying no
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
    if out["nccl"] and torch.version.cuda:
        try:
            version = torch.cuda.nccl.version()
            out["nccl_version"] = (".".join(map(str, version)) if isinstance(version, tuple)
                                   else str(version))
        except Exception:  # noqa: BLE001 - only shown
            pass
    return out


def _probe_torch(timeout_s: float) -> dict[str, Any]:
    import json
    import subprocess

    code = ("import json, hpsearch.driver.cluster.doctor_node as d; "
            "print(json.dumps(d.torch_facts()))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"importing torch and asking for CUDA took over {timeout_s:g} s "
                         "(a hung NVIDIA driver?)"}
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    try:
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        pass
    return {"error": lines[-1] if lines else f"exit status {done.returncode}"}


def _nvidia_driver() -> dict[str, Any]:
    """The NVIDIA kernel driver's version and the newest CUDA it runs, without torch."""
    import ctypes
    import glob
    import re

    out: dict[str, Any] = {"driver": None, "driver_cuda": None,
                           "device_files": len(glob.glob("/dev/nvidia[0-9]*"))}
    try:
        with open("/proc/driver/nvidia/version") as f:
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d[\w.]*)", f.read())
        out["driver"] = found.group(1) if found else None
    except OSError:
        pass
    try:
        version = ctypes.c_int()
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version)) == 0:
            out["driver_cuda"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    except (OSError, AttributeError):
        pass
    return out


def _ipv4_of(name: str) -> str | None:
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _network(node_ip: str) -> dict[str, Any]:
    import socket

    interfaces: dict[str, str] = {}
    try:
        for _, name in socket.if_nameindex():
            address = _ipv4_of(name)
            if address:
                interfaces[name] = address
    except OSError:
        pass
    try:
        hcas = sorted(os.listdir("/sys/class/infiniband"))
    except OSError:
        hcas = []
    return {"interfaces": interfaces,
            "ray_interface": next((n for n, a in interfaces.items() if a == node_ip), None),
            "env": {k: os.environ[k] for k in _NCCL_ENV if k in os.environ},
            "ib_hcas": hcas}


def storage_facts(path: str) -> dict[str, Any]:
    """The storage as this node sees it. A storage that does not exist yet (``run``
    creates it) is checked at its nearest existing parent (``checked``)."""
    import shutil
    import tempfile

    from hpsearch.fence import remove_inside

    checked = path
    while not os.path.isdir(checked) and checked != os.path.dirname(checked):
        checked = os.path.dirname(checked)
    out: dict[str, Any] = {"path": path, "checked": checked, "exists": os.path.isdir(path),
                           "writable": False, "error": None, "mount": None, "fstype": None,
                           "free": None}
    if os.path.lexists(path) and not out["exists"]:
        out["error"] = "is not a directory"
        return out
    out["mount"], out["fstype"] = _mount_of(checked)
    try:
        out["free"] = shutil.disk_usage(checked).free
    except OSError as exc:
        out["error"] = exc.strerror or str(exc)
    try:
        fd, probe = tempfile.mkstemp(prefix=MARKER_PREFIX, dir=checked)
        try:
            os.write(fd, b"hpsearch doctor\n")
            os.fsync(fd)
        finally:
            os.close(fd)
            remove_inside(checked, probe)
        out["writable"] = True
    except OSError as exc:
        out["error"] = f"cannot write to {checked}: {exc.strerror or exc}"
    return out


def _mount_of(path: str) -> tuple[str | None, str | None]:
    """The mount point holding ``path`` and its filesystem type (from /proc/mounts)."""
    point = os.path.realpath(path)
    while not os.path.ismount(point) and point != os.path.dirname(point):
        point = os.path.dirname(point)
    fstype = None
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[1].replace("\\040", " ") == point:
                    fstype = parts[2]  # the last mount on a point is the one in effect
    except OSError:
        pass
    return point, fstype


def auth_facts() -> dict[str, Any]:
    """Ray's token authentication as this node's Ray processes see it; the token itself
    never leaves the node, only an 8-digit fingerprint to compare nodes by."""
    import hashlib
    import stat
    from pathlib import Path

    out: dict[str, Any] = {"mode": os.environ.get("RAY_AUTH_MODE"), "token": None,
                           "fingerprint": None, "file_mode": None}
    token = os.environ.get("RAY_AUTH_TOKEN")
    if token:
        out["token"] = "RAY_AUTH_TOKEN"
    else:
        path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
        try:
            token = path.read_text()
            out["token"] = os.fspath(path)
            out["file_mode"] = f"{stat.S_IMODE(path.stat().st_mode):04o}"
        except OSError:
            token = None
    if token and token.strip():
        out["fingerprint"] = hashlib.sha256(token.strip().encode()).hexdigest()[:8]
    return out


def write_marker(directory: str, name: str, content: str) -> None:
    """Write the storage comparison's marker file ``directory/name`` (on the writer node)."""
    with open(os.path.join(directory, name), "w") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())


def read_marker(path: str) -> str | None:
    """The marker's content as this node sees it, or ``None`` if it sees no such file."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def remove_marker(directory: str, name: str) -> None:
    """Remove the marker (through the deletion fence of :mod:`hpsearch.store.layout`)."""
    from hpsearch.fence import remove_inside

    remove_inside(directory, os.path.join(directory, name))


def now() -> float:
    """This node's clock (epoch seconds), for the clock-skew round."""
    return time.time()
