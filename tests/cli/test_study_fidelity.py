"""The Optuna study holds exactly the sweep's trials, as the trial tables record them:
after a clean `hpsearch run`, and after a SIGKILL of the driver and `hpsearch resume`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

import hpsearch

from .study_check import assert_study_matches_tables

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPACE = """\
    name: fidelity
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
      warmup_steps: {type: int, low: 0, high: 40, step: 10}
      batch_size: 16
    search: {algorithm: tpe, seed: 5, n_startup_trials: 3}
    scheduler: {type: asha, time_attr: epoch, max_t: 6, grace_period: 1, reduction_factor: 3}
    trials: {num: 8, max_concurrent: 2}
    resources: {workers: 1}
"""


def hpsearch_cmd(*args: str, cwd: Path, env: dict | None = None, timeout: float = 600):
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def write_space(tmp_path: Path) -> Path:
    space = tmp_path / "fidelity.yaml"
    space.write_text(textwrap.dedent(SPACE))
    return space


def test_study_matches_the_tables_after_a_clean_run(tmp_path, no_ray_running):
    run = hpsearch_cmd("run", str(write_space(tmp_path)), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    sweep = tmp_path / "runs" / "fidelity"
    study = assert_study_matches_tables(sweep, "fidelity")
    states = {t.state for t in study.trials}
    # ASHA stopped some: they are PRUNED with their curve, not COMPLETE
    assert optuna.trial.TrialState.PRUNED in states
    assert optuna.trial.TrialState.COMPLETE in states
    assert optuna.trial.TrialState.FAIL not in states


def test_study_matches_the_tables_after_a_kill_and_resume(tmp_path, no_ray_running,
                                                         leftover_ray):
    sweep = tmp_path / "runs" / "fidelity"
    # SIGKILL the driver right after its 4th write of the tables, mid-sweep: the tables
    # then hold every report the driver has seen, and trials are running.
    killed = hpsearch_cmd("run", str(write_space(tmp_path)), cwd=tmp_path,
                          env={"HPSEARCH_TEST_KILL_AFTER_TABLE_WRITES": "4"})
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    before = hpsearch.read_trials(sweep)
    assert len(before) < 8

    resumed = hpsearch_cmd("resume", "fidelity", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    trials = hpsearch.read_trials(sweep)
    assert len(trials) == 8 and trials.trial_id.is_unique
    assert_study_matches_tables(sweep, "fidelity")
    assert not leftover_ray(), "resume left Ray processes behind"
