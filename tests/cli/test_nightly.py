"""The overnight cycle from the command line: a notification however the run ends (a
deadline that ends the sweep on time, with its report, is in test_nightly_docs.py, run as
docs/nightly.md writes it; Ctrl-C and a notify command that hangs, in test_run_cli.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


pytestmark = [pytest.mark.ray, pytest.mark.slow]

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
                                                                        session_ray):
    proc = hpsearch_run(tmp_path, DIVERGES, "--notify", NOTIFY + "; exit 7")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, out + err  # no trial completed; notify's 7 changes nothing
    assert notified(tmp_path)["HPSEARCH_STATUS"] == "no_trial_completed"
