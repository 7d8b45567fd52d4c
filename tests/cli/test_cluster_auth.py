"""A cluster with token authentication (as `cluster.yaml` starts one): a client without
the token, or with a wrong one, gets one line saying so and what to do, in seconds, not
Ray's 20 s of retries ending in "cannot connect"."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from .cluster import ray_cluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

QUICKSTART = str(Path(__file__).parents[2] / "search_spaces" / "quickstart.yaml")


def dry_run(address: str, env: dict, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "hpsearch", "run", QUICKSTART, "--dry-run",
                             "--address", address], env=env, cwd=cwd, capture_output=True,
                            text=True, timeout=120)
    return result, time.monotonic() - start


def test_token_mistakes_are_named_at_once(tmp_path, no_ray_running):
    with ray_cluster(tmp_path, [["--num-cpus=1"]], token=True) as cluster:
        no_token = {**cluster.env, "RAY_AUTH_MODE": "disabled"}
        result, took = dry_run(cluster.address, no_token, tmp_path)
        assert result.returncode == 2 and took < 15, (took, result.stderr[-500:])
        assert "requires token authentication" in result.stderr
        assert "export RAY_AUTH_MODE=token" in result.stderr

        wrong = {**cluster.env, "RAY_AUTH_TOKEN": "0" * 32}
        result, took = dry_run(cluster.address, wrong, tmp_path)
        assert result.returncode == 2 and took < 15
        assert "refused this client's token" in result.stderr

        result, _ = dry_run(cluster.address, cluster.env, tmp_path)  # the right token
        assert result.returncode == 0, result.stderr[-1000:]
        assert "dry run" in result.stdout
