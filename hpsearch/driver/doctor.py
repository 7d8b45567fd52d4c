"""``hpsearch doctor``: check every node of a cluster before a sweep spends GPU-hours on it.

The failures that waste a night on bare metal happen before any training: a node whose
shared storage is not mounted, a torch CUDA build the NVIDIA driver cannot run, NCCL
talking over an interface that does not connect the nodes, a node that never joined.
:func:`run_doctor` asks every node at once, with one small Ray task each (no CPU or GPU
reserved, so it also runs beside a sweep), and :func:`diagnose` turns the answers into one
line per problem. Nothing is changed on the nodes except a marker file, written to the
storage by one node, read by all, and then removed.

Per node: Python, Ray, torch and hpsearch versions; CUDA, the GPUs, the driver's CUDA
version against torch's; NCCL and the network interface it would use; the storage
(exists, its filesystem, writable, the same files as the other nodes, free space); its
clock against the head's; Ray's token authentication.

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
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from hpsearch.errors import ClusterError

__all__ = ["CLOCK_SKEW_LIMIT_S", "MIN_FREE_BYTES", "TEST_NODE_STORAGE_ENV", "DoctorReport",
           "diagnose", "nccl_interfaces", "node_facts", "require_healthy_cluster", "run_doctor"]

#: Test-only: on a node whose Ray processes have it, the storage checked there.
TEST_NODE_STORAGE_ENV = "HPSEARCH_TEST_NODE_STORAGE"
#: A node's clock may differ from the head's by this much.
CLOCK_SKEW_LIMIT_S = 1.0
#: Less free space than this under the storage is a problem (checkpoints go there).
MIN_FREE_BYTES = 1 << 30
_MARKER_PREFIX = ".hpsearch-doctor-"
_NCCL_ENV = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_P2P_DISABLE",
             "NCCL_DEBUG")
_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address


# --- on every node (Ray tasks) ---------------------------------------------------------


def node_facts(storage: str | None, *, probe_timeout_s: float = 90.0) -> dict[str, Any]:
    """What this node has (runs as a Ray task on the node). Plain data, for :func:`diagnose`."""
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
        "storage": _storage(os.environ.get(TEST_NODE_STORAGE_ENV) or storage)
        if storage else None,
        "storage_overridden": bool(storage and os.environ.get(TEST_NODE_STORAGE_ENV)),
        "auth": _auth(),
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

    code = "import json, hpsearch.driver.doctor as d; print(json.dumps(d.torch_facts()))"
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


def _storage(path: str) -> dict[str, Any]:
    """The storage as this node sees it. A storage that does not exist yet (``run``
    creates it) is checked at its nearest existing parent (``checked``)."""
    import shutil
    import tempfile

    from hpsearch.store.layout import remove_inside

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
        fd, probe = tempfile.mkstemp(prefix=_MARKER_PREFIX, dir=checked)
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


def _auth() -> dict[str, Any]:
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
    with open(os.path.join(directory, name), "w") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())


def read_marker(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def remove_marker(directory: str, name: str) -> None:
    from hpsearch.store.layout import remove_inside

    remove_inside(directory, os.path.join(directory, name))


def _now() -> float:
    return time.time()


# --- what the answers mean (pure) -------------------------------------------------------


def nccl_interfaces(interfaces: Mapping[str, str], socket_ifname: str | None) -> list[str]:
    """The interfaces NCCL's socket transport and bootstrap would use, in order, from
    ``{name: IPv4}`` (interfaces without an address are never used).

    As NCCL chooses: ``NCCL_SOCKET_IFNAME`` when set (comma-separated prefixes; ``=name``
    exact; a leading ``^`` excludes instead); otherwise ``ib*`` interfaces, else any but
    ``docker*`` and ``lo*``, else ``docker*``, else ``lo*``.

    Example:
        >>> nccl_interfaces({"lo": "127.0.0.1", "docker0": "172.17.0.1", "eth0": "10.0.0.5"}, None)
        ['eth0']
        >>> nccl_interfaces({"lo": "127.0.0.1", "eth0": "10.0.0.5"}, "^eth")
        ['lo']
    """
    names = list(interfaces)

    def matching(spec: str) -> list[str]:
        exclude = spec.startswith("^")
        items = [s.strip() for s in spec.lstrip("^").split(",") if s.strip()]

        def hit(name: str) -> bool:
            return any(name == s[1:] if s.startswith("=") else name.startswith(s) for s in items)

        return [n for n in names if hit(n) != exclude]

    if socket_ifname:
        return matching(socket_ifname)
    for spec in ("ib", "^docker,lo", "docker", "lo"):
        found = matching(spec)
        if found:
            return found
    return []


def _label(node: Mapping[str, Any]) -> str:
    return f"node {node['node_id'][:8]} ({node['host']}, {node['ip']})"


def _cuda_tuple(version: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(version).split(".")[:2])
    except ValueError:
        return None


def diagnose(nodes: Sequence[Mapping[str, Any]], *, driver: Mapping[str, Any],
             storage: str | None = None, simulate_gpu: bool = False,
             expected_nodes: int | None = None,
             dead: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """``(problems, warnings)`` of a cluster from its nodes' facts, one line each.

    Args:
        nodes: :func:`node_facts` of each node, with ``node_id``, ``head``, ``ray_gpus``,
            and after the storage round ``storage.shared`` and ``clock_offset_s``.
        driver: Versions of the process that runs the sweep's driver.
        storage: The storage directory checked, if any.
        simulate_gpu: ``HPSEARCH_SIMULATE_GPU=1``: GPUs are declared, not real; CUDA and
            NCCL are not required.
        expected_nodes: How many nodes should be alive.
        dead: Labels of nodes Ray lists as dead.
    """
    problems: list[str] = []
    warnings: list[str] = []
    head = next((n for n in nodes if n.get("head")), nodes[0] if nodes else None)
    if expected_nodes is not None and len(nodes) < expected_nodes:
        problems.append(
            f"{len(nodes)} node(s) alive, {expected_nodes} expected: a node that cannot join "
            "(Ray not started, another Ray version, no or another token) is missing; "
            "`ray status` on the head, and the node's /tmp/ray/session_latest/logs say why")
    warnings += [f"{label} is dead" for label in dead]
    if head is None:
        return problems, warnings
    many = len(nodes) > 1
    exists_somewhere = any((n.get("storage") or {}).get("exists") for n in nodes)
    if storage and not exists_somewhere and any(n.get("storage") for n in nodes):
        warnings.append(f"the storage {storage} does not exist yet on any node (run creates "
                        "it); its nearest existing parent was checked")
    for key, what in (("python", "Python"), ("ray", "Ray"), ("hpsearch", "hpsearch")):
        if driver.get(key) and head.get(key) and driver[key] != head[key]:
            problems.append(f"this machine (the driver) has {what} {driver[key]} but the head "
                            f"node has {head[key]}: install the same version everywhere")
    for node in nodes:
        where = _label(node)
        for key, what in (("python", "Python"), ("ray", "Ray"), ("hpsearch", "hpsearch")):
            if node is not head and node.get(key) != head.get(key):
                problems.append(f"{where} has {what} {node.get(key)} but the head node has "
                                f"{head.get(key)}: install the same version on every node")
        torch_ = node.get("torch") or {}
        head_torch = (head.get("torch") or {}).get("version")
        if node is not head and torch_.get("version") != head_torch and torch_.get("version"):
            problems.append(f"{where} has torch {torch_.get('version')} but the head node has "
                            f"{head_torch}: install the same build on every node")
        if not torch_.get("version"):
            problems.append(f"{where}: torch cannot be imported: {torch_.get('error')}")
        problems += _gpu_problems(node, where, torch_, simulate_gpu, warnings)
        problems += _nccl_problems(node, where, torch_, simulate_gpu, many, warnings)
        problems += _storage_problems(node, where, storage, exists_somewhere)
        offset = node.get("clock_offset_s")
        if offset is not None and abs(offset) > CLOCK_SKEW_LIMIT_S:
            problems.append(f"{where}: its clock is {offset:+.1f} s off the head node's (limit "
                            f"{CLOCK_SKEW_LIMIT_S:g} s): run chrony or systemd-timesyncd on "
                            "every node")
        problems += _auth_problems(node, where, head, many, warnings)
    return problems, warnings


def _gpu_problems(node, where, torch_, simulate_gpu, warnings) -> list[str]:
    out: list[str] = []
    ray_gpus = node.get("ray_gpus") or 0
    nvidia = node.get("nvidia") or {}
    if not ray_gpus:
        if nvidia.get("device_files"):
            warnings.append(f"{where} has {nvidia['device_files']} NVIDIA device(s) but Ray "
                            "declares no GPU there (started with --num-gpus 0, or "
                            "CUDA_VISIBLE_DEVICES empty?)")
        return out
    if simulate_gpu:
        return out
    if not torch_.get("version"):
        return out
    if not torch_.get("cuda_build"):
        return [f"{where}: Ray declares {ray_gpus:g} GPU(s) but torch {torch_['version']} is a "
                "CPU build: install the CUDA build that matches the NVIDIA driver "
                f"(driver {nvidia.get('driver') or '?'}, CUDA {nvidia.get('driver_cuda') or '?'})"]
    built, runs = _cuda_tuple(torch_["cuda_build"]), _cuda_tuple(nvidia.get("driver_cuda"))
    if built and runs and built[0] > runs[0]:
        out.append(f"{where}: torch {torch_['version']} needs CUDA {torch_['cuda_build']} but "
                   f"the NVIDIA driver {nvidia.get('driver') or ''} runs CUDA up to "
                   f"{nvidia['driver_cuda']}: upgrade the driver or install torch built for "
                   f"CUDA {nvidia['driver_cuda']}")
    elif built and runs and built > runs:
        warnings.append(f"{where}: torch is built for CUDA {torch_['cuda_build']}, the driver "
                        f"runs up to {nvidia['driver_cuda']}: it works through CUDA's "
                        "minor-version compatibility, but some kernels may need a newer driver")
    if not torch_.get("cuda"):
        reason = f": {torch_['error']}" if torch_.get("error") else ""
        out.append(f"{where}: Ray declares {ray_gpus:g} GPU(s) but torch {torch_['version']} "
                   f"(CUDA {torch_['cuda_build']}) cannot use them{reason}")
    elif len(torch_.get("devices") or []) < ray_gpus:
        out.append(f"{where}: Ray declares {ray_gpus:g} GPU(s) but torch sees "
                   f"{len(torch_['devices'])}: check CUDA_VISIBLE_DEVICES and --num-gpus of "
                   "its `ray start`")
    return out


def _nccl_problems(node, where, torch_, simulate_gpu, many, warnings) -> list[str]:
    out: list[str] = []
    if not node.get("ray_gpus"):
        return out
    if not simulate_gpu and torch_.get("cuda_build") and torch_.get("nccl") is False:
        out.append(f"{where}: torch {torch_['version']} has no NCCL: multi-worker GPU trials "
                   "cannot run there")
    net = node.get("net") or {}
    interfaces, env = net.get("interfaces") or {}, net.get("env") or {}
    ifname = env.get("NCCL_SOCKET_IFNAME")
    chosen = nccl_interfaces(interfaces, ifname)
    have = ", ".join(f"{n} {a}" for n, a in interfaces.items()) or "none with an IPv4 address"
    if ifname and not chosen:
        out.append(f"{where}: NCCL_SOCKET_IFNAME={ifname} matches no interface there (it "
                   f"has: {have}): NCCL fails with 'no socket interface found'; set it to "
                   "the interface that connects the nodes")
    elif many and chosen and all(n.startswith(("lo", "docker")) for n in chosen):
        out.append(f"{where}: NCCL would talk over {', '.join(chosen)}, which does not reach "
                   f"other nodes (it has: {have}): set NCCL_SOCKET_IFNAME")
    elif (many and not ifname and chosen and not chosen[0].startswith("ib")
          and net.get("ray_interface") and chosen[0] != net["ray_interface"]):
        warnings.append(f"{where}: NCCL would use {chosen[0]} ({interfaces[chosen[0]]}) but Ray "
                        f"reaches this node on {net['ray_interface']} ({node['ip']}); if "
                        f"{chosen[0]} does not connect the nodes, trials hang at their first "
                        f"all-reduce: set NCCL_SOCKET_IFNAME={net['ray_interface']} on every "
                        "node")
    hcas = net.get("ib_hcas") or []
    wanted = env.get("NCCL_IB_HCA")
    if wanted:
        names = [s.strip().lstrip("=").split(":")[0] for s in wanted.lstrip("^").split(",")
                 if s.strip()]
        missing = [n for n in names if not any(h.startswith(n) for h in hcas)]
        if missing and not wanted.startswith("^"):
            out.append(f"{where}: NCCL_IB_HCA={wanted} names {', '.join(missing)}, which it does "
                       f"not have (InfiniBand devices: {', '.join(hcas) or 'none'}): NCCL falls "
                       "back to TCP sockets or fails")
    if hcas and env.get("NCCL_IB_DISABLE") == "1":
        warnings.append(f"{where}: NCCL_IB_DISABLE=1 although it has InfiniBand "
                        f"({', '.join(hcas)}): NCCL uses TCP sockets")
    return out


def _storage_problems(node, where, storage, exists_somewhere) -> list[str]:
    facts = node.get("storage")
    if not storage or facts is None:
        return []
    path = facts["path"]
    if facts["error"] == "is not a directory":
        return [f"{where}: the storage {path} is not a directory there"]
    out = []
    if not facts["exists"] and exists_somewhere:
        out.append(f"{where}: the storage {path} does not exist there (it does on other "
                   "nodes): mount the shared storage at the same path on every node")
    if not facts["writable"]:
        out.append(f"{where}: {facts['error'] or 'cannot write there'} (trials write "
                   "checkpoints to the storage from whichever node they run on)")
    if facts.get("shared") is False:
        out.append(f"{where} does not see the marker file {facts.get('writer')} wrote to the "
                   f"storage (looked in {facts['checked']}): not the same filesystem "
                   f"({facts['fstype']} at {facts['mount']} there): mount the shared storage "
                   "at the same path on every node")
    free = facts.get("free")
    if free is not None and free < MIN_FREE_BYTES and facts["writable"]:
        out.append(f"{where}: only {_size(free)} free under {facts['checked']}")
    return out


def _auth_problems(node, where, head, many, warnings) -> list[str]:
    auth, head_auth = node.get("auth") or {}, head.get("auth") or {}
    out = []
    if (auth.get("mode") or "").lower() == "token" and not auth.get("fingerprint"):
        out.append(f"{where}: RAY_AUTH_MODE=token but no token there (RAY_AUTH_TOKEN, "
                   "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
    if (node is not head and auth.get("fingerprint") and head_auth.get("fingerprint")
            and auth["fingerprint"] != head_auth["fingerprint"]):
        out.append(f"{where} holds another token than the head node (fingerprint "
                   f"{auth['fingerprint']}, head {head_auth['fingerprint']}): copy the head's "
                   "~/.ray/auth_token there")
    if node is not head and (auth.get("mode") or "") != (head_auth.get("mode") or ""):
        warnings.append(f"{where}: RAY_AUTH_MODE={auth.get('mode') or '(unset)'} but "
                        f"{head_auth.get('mode') or '(unset)'} on the head node")
    if auth.get("file_mode") and int(auth["file_mode"], 8) & 0o077:
        warnings.append(f"{where}: {auth['token']} is readable by others (mode "
                        f"{auth['file_mode']}): chmod 600 it")
    if many and node is head and (auth.get("mode") or "").lower() != "token":
        warnings.append("token authentication is off: anyone who reaches the cluster's ports "
                        "can run code on it (docs/cluster.md, Token authentication)")
    return out


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# --- the report -------------------------------------------------------------------------


@dataclass
class DoctorReport:
    """What :func:`run_doctor` found: each node's facts, problems, warnings."""

    nodes: list[dict[str, Any]]
    storage: str | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    simulate_gpu: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        out = [f"hpsearch doctor: {len(self.nodes)} node(s)"
               + (f", storage {self.storage}" if self.storage else ", no --storage given")
               + (" [SIMULATED GPUs: CUDA and NCCL not required]" if self.simulate_gpu else "")]
        for node in self.nodes:
            out.append(_label(node) + ("  head" if node.get("head") else ""))
            out += ["  " + line for line in _node_lines(node)]
        for title, items in (("problems", self.problems), ("warnings", self.warnings)):
            if items:
                out.append(f"{title} ({len(items)}):")
                out += [f"  {item}" for item in items]
        if self.ok:
            out.append("no problems found")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"storage": self.storage, "nodes": self.nodes, "problems": self.problems,
                "warnings": self.warnings, "simulate_gpu": self.simulate_gpu}


def _node_lines(node: Mapping[str, Any]) -> list[str]:
    torch_ = node.get("torch") or {}
    nvidia = node.get("nvidia") or {}
    lines = [f"versions  Python {node.get('python')}, Ray {node.get('ray')}, torch "
             f"{torch_.get('version') or '-'}, hpsearch {node.get('hpsearch')}"]
    devices = torch_.get("devices") or []
    gpus = (f"{len(devices)} x {devices[0]}" if devices and len(set(devices)) == 1
            else ", ".join(devices) or "none visible to torch")
    lines.append(f"gpus      Ray declares {node.get('ray_gpus') or 0:g}; {gpus}; torch CUDA "
                 f"{torch_.get('cuda_build') or '-'}, driver {nvidia.get('driver') or '-'} "
                 f"(CUDA {nvidia.get('driver_cuda') or '-'})")
    net = node.get("net") or {}
    chosen = nccl_interfaces(net.get("interfaces") or {},
                             (net.get("env") or {}).get("NCCL_SOCKET_IFNAME"))
    settings = " ".join(f"{k}={v}" for k, v in (net.get("env") or {}).items()) or "no NCCL_* set"
    lines.append(f"nccl      {torch_.get('nccl_version') or ('yes' if torch_.get('nccl') else 'no')}"
                 f"; sockets via {', '.join(chosen) or '-'}; Ray on "
                 f"{net.get('ray_interface') or '?'} ({node.get('ip')}); InfiniBand "
                 f"{', '.join(net.get('ib_hcas') or []) or 'none'}; {settings}")
    facts = node.get("storage")
    if facts is not None:
        state = [facts["path"] + (" (test override)" if node.get("storage_overridden") else "")]
        if not facts["exists"]:
            state.append(f"does not exist, checked {facts['checked']}")
        if facts["error"] != "is not a directory":
            state.append(f"{facts['fstype'] or '?'} at {facts['mount']}")
            state.append("writable" if facts["writable"] else "NOT writable")
            if facts.get("shared") is not None:
                state.append("sees the marker" if facts["shared"] else "does NOT see the marker")
            if facts.get("free") is not None:
                state.append(f"{_size(facts['free'])} free")
        else:
            state.append("not a directory")
        lines.append("storage   " + ", ".join(state))
    if node.get("clock_offset_s") is not None:
        lines.append(f"clock     {node['clock_offset_s']:+.3f} s vs the head node")
    auth = node.get("auth") or {}
    token = (f"token {auth['fingerprint']} from {auth['token']}"
             + (f" (mode {auth['file_mode']})" if auth.get("file_mode") else "")
             if auth.get("fingerprint") else "no token")
    lines.append(f"auth      RAY_AUTH_MODE={auth.get('mode') or '(unset)'}, {token}")
    return lines


# --- the driver's side ------------------------------------------------------------------


def run_doctor(*, address: str | None = None, storage: str | None = None,
               expected_nodes: int | None = None, timeout_s: float = 120.0) -> DoctorReport:
    """Check every alive node of the cluster at ``address`` (see the module doc).

    Args:
        address: Ray address; ``None``: ``$RAY_ADDRESS``, a cluster started on this machine,
            else a local instance.
        storage: The sweeps' storage directory, checked on every node.
        expected_nodes: How many nodes should be alive.
        timeout_s: How long a node may take to answer.

    Raises:
        ClusterError: The cluster cannot be reached.
    """
    import ray

    from hpsearch.driver.connect import connect
    from hpsearch.driver.preflight import simulating_gpus

    owned = not ray.is_initialized()
    connect(address)
    try:
        nodes, dead, problems = _ask_every_node(storage, timeout_s)
        if storage:
            problems += _compare_storage(nodes, timeout_s)
        _measure_clocks(nodes, timeout_s)
    finally:
        if owned:
            ray.shutdown()
    driver = {"python": platform.python_version(), "ray": ray.__version__,
              "hpsearch": _hpsearch_version()}
    simulate = simulating_gpus()
    found, warnings = diagnose(nodes, driver=driver, storage=storage, simulate_gpu=simulate,
                               expected_nodes=expected_nodes, dead=dead)
    return DoctorReport(nodes, storage, problems + found, warnings, simulate)


def require_healthy_cluster(*, address: str | None, storage: str | None, stream: Any) -> None:
    """``hpsearch run --preflight``: run the doctor, print its report, and refuse to start
    the sweep if it found a problem.

    Raises:
        ClusterError: One line per problem.
    """
    report = run_doctor(address=address, storage=storage)
    for line in report.lines():
        print(line, file=stream)
    stream.flush()
    if not report.ok:
        raise ClusterError(f"hpsearch doctor found {len(report.problems)} problem(s); no trial "
                           "was started:\n" + "\n".join(f"  {p}" for p in report.problems))


def _hpsearch_version() -> str:
    import hpsearch

    return hpsearch.__version__


def _on(node_id: str, **options: Any) -> dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"num_cpus": 0, "scheduling_strategy":
            NodeAffinitySchedulingStrategy(node_id, soft=False), **options}


def _ask_every_node(storage: str | None, timeout_s: float):
    import ray

    listed = ray.nodes()
    alive = [n for n in listed if n.get("Alive")]
    dead = [f"node {n['NodeID'][:8]} ({n.get('NodeManagerHostname')}, "
            f"{n.get('NodeManagerAddress')})" for n in listed if not n.get("Alive")]
    facts = ray.remote(node_facts)
    refs = {n["NodeID"]: facts.options(**_on(n["NodeID"])).remote(
        os.path.abspath(storage) if storage else None) for n in alive}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    nodes, problems = [], []
    for n in alive:
        ref = refs[n["NodeID"]]
        resources = n.get("Resources", {})
        meta = {"node_id": n["NodeID"], "head": "node:__internal_head__" in resources,
                "ray_gpus": resources.get("GPU", 0.0)}
        if ref not in ready:
            ray.cancel(ref, force=True)
            problems.append(f"node {n['NodeID'][:8]} ({n.get('NodeManagerHostname')}, "
                            f"{n.get('NodeManagerAddress')}) did not answer within "
                            f"{timeout_s:g} s")
            continue
        try:
            nodes.append({**meta, **ray.get(ref)})
        except Exception as exc:  # noqa: BLE001 - one node's failure is one line
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            problems.append(f"node {n['NodeID'][:8]} ({n.get('NodeManagerAddress')}): the check "
                            f"failed: {last}")
    nodes.sort(key=lambda node: (not node["head"], node["node_id"]))
    return nodes, dead, problems


def _compare_storage(nodes: list[dict[str, Any]], timeout_s: float) -> list[str]:
    """One node writes a marker to its storage; every node looks for it at the same path.
    Returns the problem, if the comparison itself failed."""
    writers = [n for n in nodes if n.get("storage") and n["storage"]["writable"]]
    if len(nodes) < 2 or not writers:
        return []
    try:
        _marker_round(nodes, writers[0], timeout_s)
    except Exception as exc:  # noqa: BLE001 - a node lost halfway: one line
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        return [f"comparing the storage between nodes failed: {last}"]
    return []


def _marker_round(nodes: list[dict[str, Any]], writer: dict[str, Any], timeout_s: float) -> None:
    import secrets

    import ray

    directory = writer["storage"]["checked"]
    name = f"{_MARKER_PREFIX}{secrets.token_hex(8)}"
    content = f"written by node {writer['node_id']} at {time.time()}\n"
    ray.get(ray.remote(write_marker).options(**_on(writer["node_id"])).remote(
        directory, name, content), timeout=timeout_s)
    try:
        # Each node looks where it would write: the same path, unless a test overrides it.
        reader = ray.remote(read_marker)
        seen = ray.get([reader.options(**_on(n["node_id"])).remote(
            os.path.join(n["storage"]["checked"] if n.get("storage") else directory, name))
            for n in nodes], timeout=timeout_s)
    finally:
        ray.get(ray.remote(remove_marker).options(**_on(writer["node_id"])).remote(
            directory, name), timeout=timeout_s)
    for node, text in zip(nodes, seen):
        if node.get("storage") is not None:
            node["storage"]["shared"] = text == content
            node["storage"]["writer"] = _label(writer)


def _measure_clocks(nodes: list[dict[str, Any]], timeout_s: float, rounds: int = 3) -> None:
    """Each node's clock against this process's, from the quickest of a few round trips,
    then against the head node's."""
    import ray

    now = ray.remote(_now)
    for node in nodes:
        best = None
        for _ in range(rounds):
            sent = time.time()
            theirs = ray.get(now.options(**_on(node["node_id"])).remote(), timeout=timeout_s)
            back = time.time()
            if best is None or back - sent < best[0]:
                best = (back - sent, theirs - (sent + back) / 2)
        node["clock_rtt_s"], node["clock_offset_s"] = best
    head = next((n for n in nodes if n.get("head")), nodes[0] if nodes else None)
    if head is not None:
        base = head["clock_offset_s"]
        for node in nodes:
            node["clock_offset_s"] -= base
