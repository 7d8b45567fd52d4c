"""The overnight cycle from the command line: a deadline that ends the sweep on time, a
report, and a notification however the run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import hpsearch

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: The documented grace after a deadline: trials are stopped, tables, manifest and report
#: written (docs/nightly.md).
GRACE_S = 30

LONG = """\
    name: long
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
      batch_size: 4
    search: {algorithm: random, seed: 0}
    scheduler: {type: fifo, max_t: 60}
    trials: {num: 12, max_concurrent: 2}
"""

NOTIFY = 'env | grep ^HPSEARCH_ | sort > "$NOTIFY_OUT"'


def hpsearch_run(tmp_path: Path, space: str, *args: str, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(space))
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(path), *args], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "NOTIFY_OUT": str(tmp_path / "notified")},
    )


def notified(tmp_path: Path) -> dict[str, str]:
    lines = (tmp_path / "notified").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_a_deadline_ends_the_sweep_on_time_with_status_deadline(tmp_path, no_ray_running):
    deadline = datetime.now().astimezone() + timedelta(seconds=40)
    proc = hpsearch_run(tmp_path, LONG, "--deadline", deadline.isoformat(timespec="seconds"),
                        "--report", "--notify", NOTIFY)
    out, err = proc.communicate(timeout=300)
    ended = datetime.now().astimezone()
    assert proc.returncode == 0, out + err
    assert ended <= deadline + timedelta(seconds=GRACE_S), (ended, deadline)
    sweep = tmp_path / "runs" / "long"
    manifest = json.loads((sweep / "manifest.json").read_text())
    assert manifest["status"] == "deadline"
    trials = hpsearch.read_trials(sweep)
    assert not trials.status.isin(["running", "pending"]).any()
    assert len(trials) < 12  # it would have needed minutes
    env = notified(tmp_path)
    assert env["HPSEARCH_STATUS"] == "deadline" and env["HPSEARCH_SWEEP"] == "long"
    assert env["HPSEARCH_REPORT"].endswith("report.html") and Path(env["HPSEARCH_REPORT"]).exists()
    assert float(env["HPSEARCH_BEST"]) == pytest.approx(trials.best_value.min())


DIVERGES = """\
    name: diverges
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e+8, high: 1.0e+9, log: true}
    scheduler: {type: fifo, max_t: 2}
    trials: {num: 2, max_concurrent: 2}
"""


def test_notify_fires_when_no_trial_completed_and_keeps_the_exit_code(tmp_path,
                                                                        no_ray_running):
    proc = hpsearch_run(tmp_path, DIVERGES, "--notify", NOTIFY + "; exit 7")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, out + err  # no trial completed; notify's 7 changes nothing
    assert notified(tmp_path)["HPSEARCH_STATUS"] == "no_trial_completed"


def test_notify_fires_on_ctrl_c_and_a_hanging_command_is_stopped(tmp_path, no_ray_running):
    slow = LONG.replace("name: long", "name: slow")
    env_timeout = {"HPSEARCH_NOTIFY_TIMEOUT_S": "5"}
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(slow))
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(path), "--notify", NOTIFY + "; sleep 600"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "NOTIFY_OUT": str(tmp_path / "notified"),
             **env_timeout},
    )
    sweep = tmp_path / "runs" / "slow"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (sweep / "trials.parquet").exists():
        time.sleep(1)
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, out + err
    assert time.monotonic() - start < 120
    assert notified(tmp_path)["HPSEARCH_STATUS"] == "interrupted"
    assert "ran past 5 s and was stopped" in err
