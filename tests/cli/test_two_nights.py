"""Two nights of the overnight cycle, as docs/nightly.md runs them: night 2 starts warm
from night 1 (its study holds night 1's trials, night 1's best configurations run first)
and proposes new configurations rather than repeating night 1's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hpsearch
from hpsearch.driver.record.study import load_sweep_study

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPACE = """\
    name: nightly
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
      hidden: {type: categorical, choices: [16, 32, 64]}
    search: {algorithm: tpe, seed: 0, n_startup_trials: 8, warm_start_best: 2}
    scheduler: {type: asha, max_t: 3, grace_period: 1, reduction_factor: 3}
    trials: {num: 5, max_concurrent: 2}
"""


def night(tmp_path: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpsearch", "run", str(tmp_path / "space.yaml"), "--name", name,
         *extra], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})


def configs(trials, order: str = "optuna_trial") -> list[tuple]:
    """The trials' configurations in the order Optuna proposed them (start order is a race:
    with two slots, the first two trials start together)."""
    return [(round(r.lr, 12), int(r.hidden)) for r in trials.sort_values(order).itertuples()]


def test_night_two_learns_from_night_one(tmp_path, session_ray):
    (tmp_path / "space.yaml").write_text(textwrap.dedent(SPACE))
    first = night(tmp_path, "night-1", "--warm-start", "latest")  # nothing to learn from yet
    assert first.returncode == 0, first.stdout + first.stderr
    assert "no earlier sweep" in first.stdout
    second = night(tmp_path, "night-2", "--warm-start", "latest")
    assert second.returncode == 0, second.stdout + second.stderr

    runs = tmp_path / "runs"
    t1, t2 = hpsearch.read_trials(runs / "night-1"), hpsearch.read_trials(runs / "night-2")
    manifest = json.loads((runs / "night-2" / "manifest.json").read_text())
    assert manifest["warm_start"]["from"] == ["night-1"]
    assert manifest["warm_start"]["imported"] == len(t1)

    # Night 2's study holds night 1's trials, linked to them.
    study = load_sweep_study(hpsearch.SweepDir.of(runs / "night-2"))
    imported = [t for t in study.trials if "warm_start" in t.user_attrs]
    assert sorted(t.user_attrs["warm_start"] for t in imported) == sorted(
        f"night-1/{tid}" for tid in t1.trial_id)
    pruned = [t for t in imported if t.user_attrs["status"] == "stopped_by_asha"]
    assert all(t.intermediate_values for t in pruned)

    # Its first proposals are night 1's two best configurations among the trials that ran
    # to the end (one ASHA stopped has only its early values to rank by), best first.
    completed = t1[t1.status == "completed"]
    best = configs(completed.nsmallest(2, "best_value"), order="best_value")
    assert best and configs(t2)[:len(best)] == best  # warm_start_best: 2, if night 1 has 2
    # And what it proposes after them is new.
    assert not set(configs(t2)[len(best):]) & set(configs(t1))
