"""docs/nightly.md's local nightly line, run as written (with a tiny space and a deadline
seconds away). Its cluster line, through `hpsearch submit` to a Ray Job, starts the sweep
whose cluster loses power in tests/cli/test_two_node_cluster.py."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from datetime import datetime, timedelta

import pytest

import hpsearch

from .nightly_doc import alerted, documented, home_with_alert

pytestmark = [pytest.mark.ray, pytest.mark.slow]

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


def test_the_documented_nightly_line_ends_by_its_deadline(tmp_path, session_ray):
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
    alert = alerted(home)
    assert alert["HPSEARCH_SWEEP"] == name and alert["HPSEARCH_STATUS"] == "deadline"
    assert alert["HPSEARCH_REPORT"] == str(sweep / "report.html")
    assert float(alert["HPSEARCH_BEST"]) == pytest.approx(trials.best_value.min())
