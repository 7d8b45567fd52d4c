"""A sweep on a disk that fills up, as a user's night would go (a real 8 MB tmpfs).

* Full at the start: ``hpsearch run`` says so in one line and writes nothing.
* Full mid-sweep (the test fills it once the sweep holds 3 checkpoints): exit 1, one line
  with the directory, the free space, what the sweep needs and the resume command; no
  trial is ``failed``; Ray's own complaints stay in the sweep's ``ray.log``; the tables
  and ``hpsearch ls`` read the sweep.
* ``hpsearch resume`` on the still-full disk: one line, nothing changed.
* Space freed, ``hpsearch resume`` finishes the plan: every planned trial completed, each
  epoch trained once (the paused ones continued from their checkpoints).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from small_disk import fill, free, small_disk

import hpsearch

pytestmark = [pytest.mark.ray, pytest.mark.slow]

EPOCHS = 8
SPACE = textwrap.dedent(f"""\
    name: night
    trainable: charlm
    objective: {{metric: val_loss, mode: min}}
    params:
      lr: {{type: float, low: 1.0e-3, high: 1.0e-2, log: true}}
      n_layer: 1
      n_embd: 32
      n_head: 2
      block_size: 32
      batch_size: 32
      samples_per_epoch: 1280
      val_samples: 32
      corpus_bytes: 200000
    search: {{algorithm: random, seed: 0}}
    scheduler: {{type: fifo, max_t: {EPOCHS}}}
    trials: {{num: 4, max_concurrent: 2}}
    resources: {{workers: 1, cpus_per_worker: 1}}
    """)


def hpsearch_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def checkpoints(sweep: Path) -> int:
    root = sweep / "checkpoints"
    return sum(name.startswith("checkpoint_") for _, dirs, _ in os.walk(root) for name in dirs)


def run_until_checkpoints(cwd: Path, disk: Path, sweep: Path, n: int) -> subprocess.Popen:
    """``hpsearch run`` of the space, returned once the sweep holds ``n`` checkpoints (its
    output goes to ``cwd/run.out`` and ``cwd/run.err``). The disk is filled then, by the
    caller: at an event, not from a thread racing the sweep."""
    with open(cwd / "run.out", "w") as out, open(cwd / "run.err", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "run", "space.yaml", "--storage", str(disk)],
            cwd=cwd, text=True, stdout=out, stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 300  # only a hang takes this long
    while checkpoints(sweep) < n:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"the sweep ended or hung before it held {n} checkpoints "
                        f"(exit {proc.returncode}):\n{(cwd / 'run.out').read_text()}"
                        f"{(cwd / 'run.err').read_text()}")
        time.sleep(0.05)
    return proc


def finished(proc: subprocess.Popen, cwd: Path) -> subprocess.CompletedProcess:
    try:
        proc.wait(timeout=300)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode,
                                       (cwd / "run.out").read_text(),
                                       (cwd / "run.err").read_text())


def error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return lines[0]


def test_a_disk_that_fills_pauses_the_sweep_and_resume_finishes_the_plan(tmp_path, session_ray):
    (tmp_path / "space.yaml").write_text(SPACE)
    with small_disk(tmp_path / "disk", size_mb=8) as disk:
        sweep = disk / "night"
        # Full before it starts: nothing is written.
        fill(disk, leave=200_000)
        result = hpsearch_cmd("run", "space.yaml", "--storage", str(disk), cwd=tmp_path)
        line = error_line(result)
        assert result.returncode == 1
        assert line.startswith(f"error: the disk holding {disk} has ") and "free" in line
        assert "Nothing was written" in line and "this command again" in line
        assert not sweep.exists()
        free(disk)

        # Full mid-sweep.
        run = run_until_checkpoints(tmp_path, disk, sweep, n=3)
        fill(disk)
        result = finished(run, tmp_path)
        line = error_line(result)
        assert result.returncode == 1, result.stdout
        assert line.startswith(f"error: the disk holding {sweep} is full (")
        assert "paused at their last checkpoint" in line and "more to finish its plan" in line
        assert line.endswith(f"`hpsearch resume night --storage {disk}`.")
        assert "ERROR" not in result.stdout and "experiment_state" not in result.stdout
        assert " failed" not in result.stdout, result.stdout
        trials = hpsearch.read_trials(sweep)
        assert "failed" not in set(trials.status)
        assert not list(sweep.rglob(".tmp-*")), "a half-written checkpoint was left"
        listed = hpsearch_cmd("ls", "--storage", str(disk), cwd=tmp_path)
        assert listed.returncode == 0 and "night" in listed.stdout, listed.stderr

        # Resume on the still-full disk: one line, nothing changed.
        before = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
        result = hpsearch_cmd("resume", "night", "--storage", str(disk), cwd=tmp_path)
        assert result.returncode == 1 and "Nothing was written" in error_line(result)
        assert f"`hpsearch resume night --storage {disk}`" in error_line(result)
        assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == before

        # Space freed: the plan is finished, no epoch trained twice.
        free(disk)
        result = hpsearch_cmd("resume", "night", "--storage", str(disk), cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "continuing" in result.stdout and "unfinished trial(s)" in result.stdout
        trials = hpsearch.read_trials(sweep)
        assert list(trials.status) == ["completed"] * 4, trials[["trial_id", "status"]]
        history = hpsearch.read_history(sweep)
        epochs = history.groupby("trial_id").epoch.apply(sorted)
        assert sorted(epochs.index) == sorted(trials.trial_id), epochs  # all 4, none more
        for trial_id, trained in epochs.items():
            assert trained == list(range(1, EPOCHS + 1)), (trial_id, trained)
