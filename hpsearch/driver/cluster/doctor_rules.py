"""What ``hpsearch doctor``'s answers mean: :func:`diagnose` turns each node's facts
(:mod:`hpsearch.driver.cluster.doctor_node`) into one line per problem and per warning. Pure, so
every rule is tested with hand-made facts.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["CLOCK_SKEW_LIMIT_S", "MIN_FREE_BYTES", "diagnose", "human_size", "nccl_interfaces",
           "node_label"]

#: A node's clock may differ from the head's by this much.
CLOCK_SKEW_LIMIT_S = 1.0
#: Less free space than this under the storage is a problem (checkpoints go there).
MIN_FREE_BYTES = 1 << 30


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


def node_label(node: Mapping[str, Any]) -> str:
    """How every line names a node: ``node 1a2b3c4d (gpu-01, 10.0.0.5)``."""
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
        where = node_label(node)
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
        warnings += _nccl_settings_unlike_head(node, where, head)
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


#: NCCL settings that, set on some nodes only, make trials across nodes hang or go over TCP.
_NCCL_SAME_EVERYWHERE = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE")


def _nccl_settings_unlike_head(node, where, head) -> list[str]:
    """A GPU node whose NCCL settings differ from the head's: most often exported in one
    shell and not in every node's `ray start`. A warning: NIC names may differ between
    machines on purpose."""
    if node is head or not node.get("ray_gpus"):
        return []
    env = (node.get("net") or {}).get("env") or {}
    head_env = (head.get("net") or {}).get("env") or {}
    return [f"{where}: {key}={env.get(key) or '(unset)'} but {head_env.get(key) or '(unset)'} "
            "on the head node: set NCCL_* in every node's `ray start` environment"
            for key in _NCCL_SAME_EVERYWHERE if env.get(key) != head_env.get(key)]


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
        out.append(f"{where}: only {human_size(free)} free under {facts['checked']}")
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


def human_size(n: float) -> str:
    """Bytes for people: ``human_size(3 << 30) == "3.0 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
