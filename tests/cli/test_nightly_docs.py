"""docs/nightly.md's command lines, run as written: the local nightly line (with a tiny
space and a deadline seconds away), and the cluster line through `hpsearch submit` to a
Ray Job on a local cluster with the Jobs API."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import hpsearch

from .cluster import ray_cluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

DOC = (Path(__file__).parents[2] / "docs" / "nightly.md").read_text()
SPACE = """\
    name: nightly
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
      batch_size: 4
    scheduler: {type: fifo, max_t: 60}
    trials: {num: 8, max_concurrent: 2}
"""
ALERT = '#!/usr/bin/env bash\nenv | grep ^HPSEARCH_ | sort > "$HOME/alerted"\n'


def documented(command: str) -> str:
    """The one line of docs/nightly.md that starts with ``command``."""
    lines = [ln.strip() for ln in DOC.splitlines() if ln.strip().startswith(command)]
    assert len(lines) == 1, lines
    return lines[0]


def home_with_alert(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    alert = home / ".local" / "bin" / "hpsearch-alert"
    alert.parent.mkdir(parents=True)
    alert.write_text(ALERT)
    alert.chmod(0o755)
    return home


def test_the_documented_nightly_line_ends_by_its_deadline(tmp_path, no_ray_running):
    line = documented("hpsearch run search_spaces/charlm.yaml")
    (tmp_path / "space.yaml").write_text(textwrap.dedent(SPACE))
    deadline = datetime.now() + timedelta(seconds=35)
    line = line.replace("search_spaces/charlm.yaml", "space.yaml")
    line = line.replace("--deadline 07:00", f"--deadline {deadline:%H:%M:%S}")
    home = home_with_alert(tmp_path)
    env = {**os.environ, "HOME": str(home), "HPSEARCH_STORAGE": str(tmp_path / "runs"),
           "RAY_AUTH_MODE": "disabled"}
    result = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert datetime.now() < deadline + timedelta(seconds=30)
    name = f"lm-{datetime.now():%Y-%m-%d}"
    sweep = tmp_path / "runs" / name
    assert json.loads((sweep / "manifest.json").read_text())["status"] == "deadline"
    assert (sweep / "report.html").exists()
    # The deadline stopped the running trials: none is left running, and the sweep ran
    # fewer trials than planned (they would have needed minutes).
    trials = hpsearch.read_trials(sweep)
    assert not trials.status.isin(["running", "pending"]).any() and len(trials) < 8
    alerted = dict(ln.split("=", 1) for ln in (home / "alerted").read_text().splitlines())
    assert alerted["HPSEARCH_SWEEP"] == name and alerted["HPSEARCH_STATUS"] == "deadline"
    assert alerted["HPSEARCH_REPORT"] == str(sweep / "report.html")
    assert float(alerted["HPSEARCH_BEST"]) == pytest.approx(trials.best_value.min())


def test_the_documented_cluster_line_submits_one_job_with_the_installed_hpsearch(
        tmp_path, no_ray_running):
    line = documented("hpsearch submit search_spaces/gpu-ddp.yaml")
    project = tmp_path / "project"
    (project / "search_spaces").mkdir(parents=True)
    (project / "search_spaces" / "gpu-ddp.yaml").write_text(
        textwrap.dedent(SPACE).replace("max_t: 60", "max_t: 2").replace("num: 8", "num: 2"))
    # A stale copy of hpsearch in the project would shadow the installed one if uploaded.
    (project / "hpsearch").mkdir()
    (project / "hpsearch" / "__init__.py").write_text("raise ImportError('the uploaded copy')\n")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "x",
                    "--allow-empty"], cwd=project, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True,
                            text=True).stdout.strip()
    storage = tmp_path / "shared"
    home = home_with_alert(tmp_path)
    # The head node's user is the one who installed the alert script: the job runs there.
    with ray_cluster(home, [["--num-cpus=2"]], dashboard=True) as cluster:
        api = f"http://127.0.0.1:{cluster.dashboard_port}"
        later = (datetime.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
        line = line.replace("/mnt/shared/hpsearch-runs", shlex.quote(str(storage)))
        line = line.replace("--deadline 07:00", f"--deadline {later}")
        env = {**cluster.env, "HOME": str(home), "RAY_API_SERVER_ADDRESS": api,
               "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        env.pop("RAY_ADDRESS", None)
        # As a user's shell runs it: the console script ($HOME expanded there).
        first = subprocess.run(["bash", "-c", line], cwd=project,
                               env=env, capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr
        name = f"lm-{datetime.now():%Y-%m-%d}"
        assert f"submitted job {name}" in first.stdout and "ray job logs" in first.stdout
        again = subprocess.run(["bash", "-c", line], cwd=project,
                               env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and "already submitted" in again.stdout
        from ray.job_submission import JobSubmissionClient

        client = JobSubmissionClient(api)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            status = str(client.get_job_status(name).value)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            time.sleep(2)
        logs = client.get_job_logs(name)
    assert status == "SUCCEEDED", logs[-3000:]
    sweep = storage / name
    manifest = json.loads((sweep / "manifest.json").read_text())
    assert manifest["git"]["commit"] == commit
    assert len(hpsearch.read_trials(sweep)) == 2
    assert (sweep / "report.html").exists() and (home / "alerted").exists()
    assert re.search(r"HPSEARCH_STATUS=finished", (home / "alerted").read_text())
