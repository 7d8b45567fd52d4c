"""cluster.yaml is a config `ray up` accepts, with token authentication on every node.

Offline: the config goes through the same preparation and schema check `ray up` runs
(``prepare_config`` then ``validate_config``, as in ``commands._bootstrap_config``); no
SSH, no Ray instance.
"""

from __future__ import annotations

import copy
import ipaddress
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
CONFIG = yaml.safe_load((ROOT / "cluster.yaml").read_text())

# Where Ray 2.60 reads the token (ray._private.authentication.authentication_token_setup.
# _get_default_token_path: Path.home() / ".ray" / "auth_token").
TOKEN_PATH = "~/.ray/auth_token"
DOC_NETWORKS = [ipaddress.ip_network(n) for n in
                ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]


def prepared(config: dict) -> dict:
    """The config as `ray up` holds it after filling in the defaults, validated."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    out = prepare_config(copy.deepcopy(config))
    validate_config(out)
    return out


def ray_start(commands: list[str]) -> list[str]:
    """The `ray start` invocation in a list of start commands, as shell words."""
    starts = [c for c in commands if "ray start" in c]
    assert len(starts) == 1, commands
    return shlex.split(starts[0].split(";")[-1])


def test_cluster_yaml_passes_ray_ups_validation():
    config = prepared(CONFIG)
    assert config["provider"]["type"] == "local"
    node_type = config["available_node_types"][config["head_node_type"]]
    assert node_type["min_workers"] == node_type["max_workers"] == len(
        CONFIG["provider"]["worker_ips"]
    )


def test_validation_rejects_a_misspelt_key():
    import jsonschema

    bad = copy.deepcopy(CONFIG)
    bad["setup_command"] = bad.pop("setup_commands")
    with pytest.raises(jsonschema.ValidationError, match="setup_command"):
        prepared(bad)


def test_addresses_are_documentation_placeholders():
    provider = CONFIG["provider"]
    for address in [provider["head_ip"], *provider["worker_ips"]]:
        ip = ipaddress.ip_address(address)
        assert any(ip in net for net in DOC_NETWORKS), address


@pytest.mark.parametrize("key", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_every_node_starts_ray_with_token_auth(key):
    words = ray_start(CONFIG[key])
    assert "RAY_AUTH_MODE=token" in words
    assert words.index("RAY_AUTH_MODE=token") < words.index("ray")


def test_head_and_workers_agree_on_the_port():
    head = ray_start(CONFIG["head_start_ray_commands"])
    worker = ray_start(CONFIG["worker_start_ray_commands"])
    assert "--head" in head and "--port=6379" in head
    assert "--address=$RAY_HEAD_IP:6379" in worker
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in head


def test_token_is_shipped_to_the_path_ray_reads():
    from ray._private.authentication.authentication_token_setup import (
        _get_default_token_path,
    )

    assert _get_default_token_path() == Path.home() / TOKEN_PATH.removeprefix("~/")
    assert CONFIG["file_mounts"][TOKEN_PATH] == TOKEN_PATH


def test_repo_is_shipped_and_installed_after_the_cuda_torch_build():
    local = CONFIG["file_mounts"]["~/hpsearch"]
    assert (ROOT / local / "pyproject.toml").exists()
    commands = CONFIG["setup_commands"]
    torch = next(i for i, c in enumerate(commands) if re.search(r"pip install torch\b", c))
    hpsearch = next(i for i, c in enumerate(commands) if c.strip() == "pip install ~/hpsearch")
    assert torch < hpsearch
    assert "--index-url https://download.pytorch.org/whl/cu" in commands[torch]


def test_setup_checks_the_shared_storage_the_gpu_space_uses():
    space = yaml.safe_load((ROOT / "search_spaces" / "gpu-ddp.yaml").read_text())
    mount = next(c.split()[2] for c in CONFIG["setup_commands"] if c.startswith("mountpoint -q"))
    assert space["storage"].startswith(mount.rstrip("/") + "/")


def test_validating_does_not_start_ray():
    import ray

    prepared(CONFIG)
    assert not ray.is_initialized()
