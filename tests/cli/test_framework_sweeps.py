"""The framework recipes swept for real with ASHA at one worker, unmodified and with no
metrics patterns: examples/hf_trainer (reports from the Trainer's printed evaluations,
steps from its progress bar) and examples/lightning (reports from CSVLogger's
metrics.csv). ASHA stops a trial at a rung while it runs, and each trial's history holds
its evaluations at the framework's own steps."""

from __future__ import annotations

import ast
import os
import shutil
import time
import subprocess
import sys
from pathlib import Path

import pytest

import hpsearch

pytestmark = [pytest.mark.ray, pytest.mark.slow]

EXAMPLES = Path(__file__).parents[2] / "examples"


def sweep(example: str, tmp_path: Path, *overrides: str) -> Path:
    shutil.copytree(EXAMPLES / example, tmp_path / example)
    space = tmp_path / example / "space.yaml"
    args = [a for o in overrides for a in ("--set", o)]
    result = subprocess.run([sys.executable, "-m", "hpsearch", "run", str(space), *args,
                             "--storage", str(tmp_path / "runs")], cwd=tmp_path, text=True,
                            capture_output=True, timeout=900,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return next((tmp_path / "runs").iterdir())


def printed_evaluations(log: str) -> list[float]:
    """The eval_loss of each dict the Trainer printed, in order."""
    out = []
    for line in log.replace("\r", "\n").splitlines():
        text = line.replace("\x1b[A", "").strip()
        if text.startswith("{'eval_loss'"):
            out.append(float(ast.literal_eval(text)["eval_loss"]))
    return out


def test_hf_trainer_recipe_swept_with_asha(tmp_path, session_ray):
    pytest.importorskip("transformers")
    root = sweep("hf_trainer", tmp_path, "trials.num=4", "trials.max_concurrent=1",
                 "search.seed=1", "search.n_startup_trials=4", "scheduler.brackets=1")
    trials = hpsearch.read_trials(root)
    history = hpsearch.read_history(root)
    assert "stopped_by_asha" in set(trials.status), trials[["trial_id", "status"]]
    for row in trials.itertuples():
        mine = history[history.trial_id == row.trial_id].sort_values("step")
        steps = list(mine.step)
        # one report per evaluation (every 10 steps), at the Trainer's own step
        assert steps == list(range(10, 10 * len(steps) + 1, 10)), steps
        log = (root / "trials" / row.trial_id / "output.log").read_text(errors="replace")
        assert list(mine.eval_loss) == pytest.approx(printed_evaluations(log)[:len(steps)])
        if row.status == "stopped_by_asha":  # stopped at a rung, while it ran
            assert steps[-1] in (10, 30) and not (root / "trials" / row.trial_id /
                                                  "checkpoint-90").exists()
        else:
            assert steps[-1] == 90


def test_lightning_recipe_swept_with_asha(tmp_path, session_ray):
    pytest.importorskip("lightning")
    root = sweep("lightning", tmp_path, "trials.num=4", "trials.max_concurrent=1",
                 "search.seed=1", "search.n_startup_trials=4", "scheduler.brackets=1")
    trials = hpsearch.read_trials(root)
    history = hpsearch.read_history(root)
    assert "stopped_by_asha" in set(trials.status), trials[["trial_id", "status"]]
    for row in trials.itertuples():
        mine = history[history.trial_id == row.trial_id].sort_values("epoch")
        epochs = list(mine.epoch)
        assert epochs == list(range(1, len(epochs) + 1)), epochs
        assert list(mine.step) == [23 * e for e in epochs]  # 23 batches an epoch
        if row.status == "stopped_by_asha":
            assert epochs[-1] in (1, 3)
        else:
            assert epochs[-1] == 9


def test_hf_trainer_recipe_at_two_workers_is_ddp_on_gloo(tmp_path, session_ray):
    """The same unmodified script at resources.workers: 2: each worker runs it with
    torchrun's variables, the Trainer (through accelerate) trains as DDP on gloo, and
    rank 0's evaluations are the reports, at the Trainer's steps."""
    pytest.importorskip("transformers")
    root = sweep("hf_trainer", tmp_path, "trials.num=2", "trials.max_concurrent=1",
                 "search.seed=1", "search.n_startup_trials=2", "resources.workers=2",
                 "scheduler.max_t=30")
    trials = hpsearch.read_trials(root)
    history = hpsearch.read_history(root)
    assert len(trials) == 2 and "completed" in set(trials.status), trials
    assert set(trials.status) <= {"completed", "stopped_by_asha"}, trials
    for row in trials.itertuples():
        folder = root / "trials" / row.trial_id
        steps = sorted(history[history.trial_id == row.trial_id].step)
        assert steps == ([10, 20, 30] if row.status == "completed" else [10])
        # both ranks ran the script; rank 1 printed no evaluation of its own
        assert (folder / "output-rank1.log").exists()
        assert printed_evaluations((folder / "output-rank1.log").read_text()) == []
        evaluations = printed_evaluations((folder / "output.log").read_text())
        assert len(evaluations) >= len(steps)
        assert list(history[history.trial_id == row.trial_id].sort_values("step").eval_loss) \
            == pytest.approx(evaluations[:len(steps)])
        if row.status == "completed":
            state = (folder / "checkpoint-20" / "trainer_state.json").read_text()
            assert '"global_step": 20' in state


def test_hf_trainer_trial_killed_with_its_driver_continues_from_its_checkpoint(
        tmp_path, session_ray):
    """The driver SIGKILLed mid-trial: nothing of the trial's command lives on, and
    `hpsearch resume` continues the HF trial from its newest whole checkpoint-N
    (resume.if_exists: checkpoint-*), each evaluation in the history once. A newer
    checkpoint the kill cut short (a folder without trainer_state.json) fails the Trainer
    at its start: that attempt's retry passes it over."""
    pytest.importorskip("transformers")
    shutil.copytree(EXAMPLES / "hf_trainer", tmp_path / "hf_trainer")
    space = tmp_path / "hf_trainer" / "space.yaml"
    sweep_dir = tmp_path / "runs" / "hf-trainer-example"
    driver = subprocess.Popen([sys.executable, "-m", "hpsearch", "run", str(space),
                               "--storage", str(tmp_path / "runs"), "--set", "trials.num=1",
                               "--set", "scheduler.max_t=400", "--set", "trials.max_failures=3"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        # checkpoint-40 whole: the Trainer writes trainer_state.json last
        while not list(sweep_dir.glob("trials/*/checkpoint-40/trainer_state.json")):
            assert driver.poll() is None and time.monotonic() < deadline, "no checkpoint-40"
            time.sleep(0.2)
    finally:
        driver.kill()
        driver.wait()
    (trial,) = (sweep_dir / "trials").iterdir()
    deadline = time.monotonic() + 60
    while _alive(str(trial)):  # the command's processes name their trial folder
        assert time.monotonic() < deadline, _alive(str(trial))
        time.sleep(0.2)
    numbers = [int(p.name.split("-")[1]) for p in trial.glob("checkpoint-*")]
    at_kill = max(int(p.parent.name.split("-")[1])
                  for p in trial.glob("checkpoint-*/trainer_state.json"))
    cut = trial / f"checkpoint-{max(numbers) + 20}"  # as a kill while the Trainer saved
    cut.mkdir()
    weights = max((trial / f"checkpoint-{at_kill}").iterdir(), key=lambda f: f.stat().st_size)
    (cut / weights.name).write_bytes(weights.read_bytes()[:100])  # the model, cut short

    result = subprocess.run([sys.executable, "-m", "hpsearch", "resume", "hf-trainer-example",
                             "--storage", str(tmp_path / "runs")],
                            cwd=tmp_path, text=True, capture_output=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trials = hpsearch.read_trials(sweep_dir)
    history = hpsearch.read_history(sweep_dir)
    assert list(trials.status) == ["completed"], trials
    runs = [ln for ln in (trial / "output.log").read_text().splitlines()
            if ln.startswith("# hpsearch")]
    assert "--resume_from_checkpoint" not in runs[0], runs
    assert runs[1].endswith(f"--resume_from_checkpoint={cut}"), runs  # refused, then
    assert f"failed, trying again: hpsearch.errors.TrialFailedError: `{sys.executable}` " \
        "exited with code 1 before its first " \
        f"report, resumed from {cut.name} (a checkpoint cut short when its trial was killed " \
        "fails so, and the trial's next attempt resumes from checkpoint-" in result.stdout
    resumed_from = int(runs[-1].rsplit("checkpoint-", 1)[1])
    assert resumed_from >= at_kill >= 40  # the newest whole checkpoint, not the first
    steps = list(history.step)
    assert len(steps) == len(set(steps)), sorted(steps)  # each evaluation once
    # Every evaluation after the checkpoint the resume continued from is there. Before it,
    # a known gap of command trials: an evaluation the script printed after the driver
    # died, followed by the checkpoint the resume continues from before the script was
    # taken down (on a fast machine), reached no record and is not evaluated again. At
    # most the evaluations between two checkpoints (every 20 steps, evaluated every 10).
    missing = sorted(set(range(10, 401, 10)) - set(steps))
    assert set(steps) <= set(range(10, 401, 10)), sorted(steps)
    assert all(resumed_from - 20 < s <= resumed_from for s in missing), (missing, resumed_from)
    assert not _alive(str(trial))


def _alive(text: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", text], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]
