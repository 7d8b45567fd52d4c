"""``hpsearch doctor``'s judgement, from hand-made node facts: each broken setting gives one
line naming the node, and a healthy cluster gives none. The checks a node runs on itself
(storage, token) run here on real directories."""

from __future__ import annotations

import copy
import os

import pytest

from hpsearch.driver.cluster import doctor_node
from hpsearch.driver.cluster.doctor import DoctorReport
from hpsearch.driver.cluster.doctor_rules import diagnose, nccl_interfaces

DRIVER = {"python": "3.11.9", "ray": "2.60.0", "hpsearch": "0.1.0"}


def gpu_node(node_id: str = "aaaaaaaa11", *, head: bool = False, **changes) -> dict:
    node = {
        "node_id": node_id, "head": head, "host": f"gpu-{node_id[:2]}", "ip": "10.0.0.5",
        "ray_gpus": 4.0, "python": "3.11.9", "ray": "2.60.0", "hpsearch": "0.1.0",
        "torch": {"version": "2.13.0+cu124", "cuda_build": "12.4", "cuda": True,
                  "devices": ["NVIDIA H100 80GB HBM3"] * 4, "nccl": True,
                  "nccl_version": "2.21.5", "error": None},
        "nvidia": {"driver": "550.54.15", "driver_cuda": "12.4", "device_files": 4},
        "net": {"interfaces": {"lo": "127.0.0.1", "eth0": "10.0.0.5"}, "ray_interface": "eth0",
                "env": {}, "ib_hcas": []},
        "storage": {"path": "/mnt/shared/runs", "checked": "/mnt/shared/runs", "exists": True,
                    "writable": True, "error": None, "mount": "/mnt/shared", "fstype": "nfs4",
                    "free": 500 << 30, "shared": True, "writer": "node aaaaaaaa"},
        "storage_overridden": False,
        "clock_offset_s": 0.002,
        "auth": {"mode": "token", "token": "/home/u/.ray/auth_token", "fingerprint": "3f9a01bc",
                 "file_mode": "0600"},
    }
    for path, value in changes.items():
        target = node
        *parents, last = path.split("__")
        for key in parents:
            target = target[key]
        target[last] = value
    return node


def cluster(*broken: dict) -> list[dict]:
    head = gpu_node("aaaaaaaa11", head=True)
    return [head, *broken] if broken else [head, gpu_node("bbbbbbbb22", ip="10.0.0.6")]


def findings(nodes, **kwargs):
    return diagnose(nodes, driver=DRIVER, storage="/mnt/shared/runs", **kwargs)


def test_a_healthy_gpu_cluster_has_no_problem_and_no_warning():
    assert findings(cluster()) == ([], [])


@pytest.mark.parametrize("change, expected", [
    ({"torch": {"version": "2.13.0", "cuda_build": None, "cuda": False, "devices": [],
                "nccl": False, "error": None}},
     "Ray declares 4 GPU(s) but torch 2.13.0 is a CPU build"),
    ({"nvidia__driver_cuda": "11.8"},
     "torch 2.13.0+cu124 needs CUDA 12.4 but the NVIDIA driver 550.54.15 runs CUDA up to 11.8"),
    ({"torch__cuda": False, "torch__error": "RuntimeError: CUDA driver initialization failed"},
     "cannot use them: RuntimeError: CUDA driver initialization failed"),
    ({"torch__devices": ["NVIDIA H100 80GB HBM3"] * 2}, "Ray declares 4 GPU(s) but torch sees 2"),
    ({"torch__nccl": False}, "has no NCCL"),
    ({"net__env": {"NCCL_SOCKET_IFNAME": "eth1"}},
     "NCCL_SOCKET_IFNAME=eth1 matches no interface there (it has: lo 127.0.0.1, eth0 10.0.0.6)"),
    ({"net__interfaces": {"lo": "127.0.0.1", "docker0": "172.17.0.1"}, "net__ray_interface": None},
     "NCCL would talk over docker0, which does not reach other nodes"),
    ({"net__env": {"NCCL_IB_HCA": "mlx5_4"}, "net__ib_hcas": ["mlx5_0", "mlx5_1"]},
     "NCCL_IB_HCA=mlx5_4 names mlx5_4, which it does not have"),
    ({"storage__exists": False, "storage__checked": "/mnt", "storage__fstype": "ext4",
      "storage__mount": "/", "storage__shared": False},
     "the storage /mnt/shared/runs does not exist there (it does on other nodes)"),
    ({"storage__writable": False, "storage__error": "cannot write to /mnt/shared/runs: Read-only "
      "file system"}, "cannot write to /mnt/shared/runs: Read-only file system"),
    ({"storage__shared": False, "storage__fstype": "ext4", "storage__mount": "/"},
     "does not see the marker file node aaaaaaaa wrote to the storage (looked in "
     "/mnt/shared/runs): not the same filesystem (ext4 at / there)"),
    ({"storage__free": 200 << 20}, "only 200.0 MiB free under /mnt/shared/runs"),
    ({"clock_offset_s": -4.2}, "its clock is -4.2 s off the head node's"),
    ({"hpsearch": "0.0.9"}, "has hpsearch 0.0.9 but the head node has 0.1.0"),
    ({"torch__version": "2.12.0+cu124"}, "has torch 2.12.0+cu124 but the head node has 2.13.0+cu124"),
    ({"auth__fingerprint": "00000000"}, "holds another token than the head node"),
    ({"auth__fingerprint": None, "auth__token": None, "auth__file_mode": None},
     "RAY_AUTH_MODE=token but no token there"),
])
def test_each_broken_setting_is_a_problem_of_that_node(change, expected):
    broken = gpu_node("bbbbbbbb22", ip="10.0.0.6", **change)
    if "net__interfaces" not in change:
        broken["net"]["interfaces"] = {"lo": "127.0.0.1", "eth0": "10.0.0.6"}
    problems, _ = findings(cluster(broken))
    assert problems and all(p.startswith("node bbbbbbbb (gpu-bb, 10.0.0.6)") for p in problems)
    assert any(expected in p for p in problems), problems


def test_a_driver_with_another_hpsearch_than_the_cluster_is_a_problem():
    problems, _ = diagnose(cluster(), driver={**DRIVER, "hpsearch": "0.2.0"})
    assert problems == ["this machine (the driver) has hpsearch 0.2.0 but the head node has "
                        "0.1.0: install the same version everywhere"]


def test_missing_nodes_and_dead_ones_are_reported():
    problems, warnings = findings(cluster(), expected_nodes=3, dead=["node cccccccc (gpu-cc, x)"])
    assert problems[0].startswith("2 node(s) alive, 3 expected")
    assert warnings == ["node cccccccc (gpu-cc, x) is dead"]


def test_simulated_gpus_need_neither_cuda_nor_nccl():
    cpu_torch = {"version": "2.13.0", "cuda_build": None, "cuda": False, "devices": [],
                 "nccl": False, "error": None}
    nodes = [gpu_node("aaaaaaaa11", head=True, torch=cpu_torch),
             gpu_node("bbbbbbbb22", torch=dict(cpu_torch))]
    assert findings(nodes, simulate_gpu=True)[0] == []
    assert len(findings(nodes)[0]) == 2


def test_warnings_do_not_count_as_problems():
    other_iface = gpu_node("bbbbbbbb22", ip="10.0.0.6",
                           net__interfaces={"lo": "127.0.0.1", "virbr0": "192.168.122.1",
                                            "eth0": "10.0.0.6"})
    loose = gpu_node("cccccccc33", ip="10.0.0.7", auth__file_mode="0644",
                     nvidia__driver_cuda="12.2",
                     net__interfaces={"lo": "127.0.0.1", "eth0": "10.0.0.7"})
    problems, warnings = findings(cluster(other_iface, loose))
    assert problems == []
    assert any("NCCL would use virbr0 (192.168.122.1) but Ray reaches this node on eth0" in w
               and "NCCL_SOCKET_IFNAME=eth0" in w for w in warnings), warnings
    assert any("readable by others (mode 0644)" in w for w in warnings)
    assert any("minor-version compatibility" in w for w in warnings)


def test_nccl_settings_that_differ_from_the_heads_are_a_warning():
    head = gpu_node("aaaaaaaa11", head=True, net__env={"NCCL_SOCKET_IFNAME": "eth0"})
    bare = gpu_node("bbbbbbbb22", ip="10.0.0.6")
    same = gpu_node("cccccccc33", ip="10.0.0.7", net__env={"NCCL_SOCKET_IFNAME": "eth0",
                                                           "NCCL_DEBUG": "INFO"})
    problems, warnings = findings([head, bare, same])
    assert problems == []
    assert warnings == ["node bbbbbbbb (gpu-bb, 10.0.0.6): NCCL_SOCKET_IFNAME=(unset) but eth0 "
                        "on the head node: set NCCL_* in every node's `ray start` environment"]


def test_a_storage_that_does_not_exist_yet_anywhere_is_checked_at_its_parent():
    nodes = cluster()
    for node in nodes:
        node["storage"].update(exists=False, checked="/mnt/shared")
    problems, warnings = findings(nodes)
    assert problems == []
    assert warnings == ["the storage /mnt/shared/runs does not exist yet on any node (run "
                        "creates it); its nearest existing parent was checked"]


@pytest.mark.parametrize("interfaces, ifname, expected", [
    ({"lo": "127.0.0.1", "docker0": "172.17.0.1", "eth0": "10.0.0.5"}, None, ["eth0"]),
    ({"lo": "127.0.0.1", "eth0": "10.0.0.5", "ib0": "10.1.0.5"}, None, ["ib0"]),
    ({"lo": "127.0.0.1", "docker0": "172.17.0.1"}, None, ["docker0"]),
    ({"lo": "127.0.0.1"}, None, ["lo"]),
    ({"eth0": "10.0.0.5", "eth1": "10.2.0.5", "ens5": "10.3.0.5"}, "eth", ["eth0", "eth1"]),
    ({"eth0": "10.0.0.5", "eth10": "10.2.0.5"}, "=eth1", []),
    ({"eth0": "10.0.0.5", "eth1": "10.2.0.5"}, "=eth1", ["eth1"]),
    ({"lo": "127.0.0.1", "eth0": "10.0.0.5", "ens5": "10.3.0.5"}, "^eth,lo", ["ens5"]),
])
def test_nccl_interfaces_are_chosen_as_nccl_chooses(interfaces, ifname, expected):
    assert nccl_interfaces(interfaces, ifname) == expected


def test_the_report_prints_each_node_then_one_line_per_problem():
    broken = gpu_node("bbbbbbbb22", ip="10.0.0.6", clock_offset_s=3.0)
    nodes = cluster(broken)
    problems, warnings = findings(nodes)
    lines = DoctorReport(nodes, "/mnt/shared/runs", problems, warnings).lines()
    assert lines[0] == "hpsearch doctor: 2 node(s), storage /mnt/shared/runs"
    assert lines[1] == "node aaaaaaaa (gpu-aa, 10.0.0.5)  head"
    assert any(ln.strip().startswith("gpus      Ray declares 4; 4 x NVIDIA H100 80GB HBM3; "
                                     "torch CUDA 12.4, driver 550.54.15 (CUDA 12.4)")
               for ln in lines)
    assert any("sockets via eth0; Ray on eth0 (10.0.0.5)" in ln for ln in lines)
    assert "problems (1):" in lines
    assert lines[-1].startswith("  node bbbbbbbb (gpu-bb, 10.0.0.6): its clock is +3.0 s off")
    assert "no problems found" not in lines


# --- what a node checks on itself, on real directories -----------------------------------


def test_storage_facts_of_a_writable_directory_leave_nothing_behind(tmp_path):
    facts = doctor_node.storage_facts(str(tmp_path))
    assert facts["exists"] and facts["writable"] and facts["error"] is None
    assert facts["free"] > 0 and facts["mount"] and os.path.ismount(facts["mount"])
    assert list(tmp_path.iterdir()) == []


def test_storage_facts_of_a_missing_directory_check_its_parent(tmp_path):
    facts = doctor_node.storage_facts(str(tmp_path / "runs" / "deeper"))
    assert not facts["exists"] and facts["checked"] == str(tmp_path) and facts["writable"]


def test_storage_facts_of_an_unwritable_directory_say_why(tmp_path):
    if os.geteuid() == 0:  # root writes through permission bits; /sys refuses everyone
        target = "/sys"
    else:
        target = str(tmp_path / "ro")
        os.mkdir(target, 0o555)
    facts = doctor_node.storage_facts(target)
    assert facts["exists"] and not facts["writable"]
    assert facts["error"].startswith(f"cannot write to {target}: ")


def test_a_marker_written_is_read_back_and_removed(tmp_path):
    doctor_node.write_marker(str(tmp_path), ".hpsearch-doctor-x", "hello\n")
    assert doctor_node.read_marker(str(tmp_path / ".hpsearch-doctor-x")) == "hello\n"
    doctor_node.remove_marker(str(tmp_path), ".hpsearch-doctor-x")
    assert doctor_node.read_marker(str(tmp_path / ".hpsearch-doctor-x")) is None


def test_auth_facts_fingerprint_the_token_and_never_hold_it(tmp_path, monkeypatch):
    token = "0123456789abcdef0123456789abcdef"
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text(token + "\n")
    os.chmod(tmp_path / ".ray" / "auth_token", 0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    facts = doctor_node.auth_facts()
    assert facts["mode"] == "token" and facts["file_mode"] == "0600"
    assert len(facts["fingerprint"]) == 8 and token not in repr(facts)
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    assert doctor_node.auth_facts()["fingerprint"] == facts["fingerprint"]


def test_torch_facts_on_this_machine_say_what_torch_can_do():
    facts = doctor_node.torch_facts()
    assert facts["version"] and facts["cuda"] == bool(facts["devices"])


def test_copying_a_node_does_not_share_its_dicts():
    # The parametrised cases rely on gpu_node building fresh dicts every time.
    a, b = gpu_node(), gpu_node()
    a["storage"]["free"] = 0
    assert b["storage"]["free"] != 0 and copy.deepcopy(a) == a
