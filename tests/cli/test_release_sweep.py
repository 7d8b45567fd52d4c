"""A sweep written by the release before the one-record core (e3eb0a5), its driver
SIGKILLed mid-sweep, as a user's disk holds it (tests/fixtures/release-e3eb0a5: its
tables, study journal, checkpoints and Tune's pickled state). This release lists, reads,
reports and warm-starts from it without Ray, and resumes it; a sweep from before trials
were linked to the study is refused in one line that says how to go on."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

import hpsearch
from hpsearch.store.layout import SweepDir

from .study_check import assert_study_matches_tables

FIXTURE = Path(__file__).parents[1] / "fixtures" / "release-e3eb0a5"
NAME = "release-e3eb0a5"


@pytest.fixture
def storage(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / NAME, symlinks=True)
    return tmp_path


def hpsearch_cmd(*args, cwd):
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_a_sweep_of_the_last_release_is_listed_read_reported_and_warm_started_from(storage):
    from hpsearch.driver.search.warmstart import import_trials
    from hpsearch.report import write_report
    from hpsearch.space import load_space

    (row,) = hpsearch.list_sweeps(storage)
    assert row["name"] == NAME and row["trials_ended"] == 2 and row["trials_planned"] == 5
    trials = hpsearch.read_trials(storage / NAME)
    assert list(trials.status) == ["completed", "stopped_by_asha", "running"]
    assert len(hpsearch.read_history(storage / NAME)) >= 10
    html, _ = write_report(storage / NAME)
    assert Path(html).exists() and "5f20a0aa" in Path(html).read_text()
    spec = load_space(SweepDir(storage / NAME).space)
    study = optuna.create_study(direction="minimize")
    summary = import_trials(spec, study, [SweepDir(storage / NAME)])
    assert summary["imported"] == 2 and len(summary["enqueued"]) == 1  # the completed one


@pytest.mark.ray
@pytest.mark.slow
def test_a_sweep_of_the_last_release_resumes_and_its_running_trials_continue(storage,
                                                                           session_ray):
    """The killed driver left one trial running with a newer checkpoint (epoch 6) than the
    tables show (epoch 4), and one the study had asked for that had trained an epoch but
    has no row. Both continue from their checkpoints; the plan of 5 is kept."""
    before = hpsearch.read_trials(storage / NAME)
    resumed = hpsearch_cmd("resume", NAME, "--storage", str(storage), cwd=storage)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "continuing 2 unfinished trial(s)" in resumed.stdout
    trials = hpsearch.read_trials(storage / NAME).set_index("trial_id")
    assert len(trials) == 5 and trials.index.is_unique
    assert set(trials.status) <= {"completed", "stopped_by_asha"}
    for tid, row in before.set_index("trial_id").iterrows():
        if row.status != "running":
            assert trials.loc[tid, "final_value"] == row.final_value
    # each continued trial's first report in the new run is one epoch past its checkpoint
    new_run = SweepDir(storage / NAME).tune
    for tid, checkpoint_step in (("770620c4", 1074), ("53fbe7d0", 179)):
        (progress,) = new_run.glob(f"hpsearch_trial_{tid}_*/progress.csv")
        with open(progress) as f:
            first = int(next(csv.DictReader(f))["step"])
        assert first == checkpoint_step + 179, (tid, first)
    assert_study_matches_tables(storage / NAME, NAME, history_may_lag=True)


def test_a_sweep_from_before_the_study_named_its_trials_is_refused_in_one_line(storage):
    sweep = SweepDir(storage / NAME)
    sweep.optuna.unlink()
    old = optuna.create_study(study_name=NAME, storage=sweep.optuna_sqlite_url)
    dist = optuna.distributions.FloatDistribution(1e-3, 3e-2, log=True)
    for value in (0.3, 0.5, 0.4):  # trials without a trial_id attribute, as then
        old.add_trial(optuna.trial.create_trial(params={"lr": 0.01}, distributions={"lr": dist},
                                                value=value))
    before = {p: p.read_bytes() for p in sweep.path.rglob("*") if p.is_file()}
    result = hpsearch_cmd("resume", NAME, "--storage", str(storage), cwd=storage)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "cannot be resumed" in lines[0] and f"--warm-start {NAME}" in lines[0]
    assert {p: p.read_bytes() for p in sweep.path.rglob("*") if p.is_file()} == before
