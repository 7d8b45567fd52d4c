"""``hpsearch run`` / ``resume`` / ``ls`` / ``trial`` as a user runs them: real subprocesses.
The quickstart runs on a local Ray instance of its own, as the README's first command does
(the session's cluster is stopped first); the others join the session's cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
import yaml

import hpsearch

from .study_check import assert_study_matches_tables

REPO = Path(__file__).parents[2]
QUICKSTART = str(REPO / "search_spaces" / "quickstart.yaml")


def hpsearch_cmd(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpsearch", *args], cwd=cwd, capture_output=True, text=True,
        timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_dry_run_prints_the_plan_without_starting_ray(tmp_path):
    result = hpsearch_cmd("run", QUICKSTART, "--dry-run", cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "dry run: no trial started" in result.stdout
    assert "rungs at epochs 1, 3, 2 brackets" in result.stdout
    assert "worst case" in result.stdout
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "address, message",
    [
        ("127.0.0.1:1", "error: cannot reach the Ray cluster at '127.0.0.1:1'"),
        ("no-port", "error: cannot parse the Ray address 'no-port'"),
        ("ray://127.0.0.1:10001", "error: Ray Client addresses (ray://127.0.0.1:10001) are not"),
    ],
)
def test_unusable_address_is_one_clear_error(tmp_path, address, message):
    result = hpsearch_cmd("run", QUICKSTART, "--address", address, cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.ray
@pytest.mark.slow
def test_quickstart_sweep_from_the_command_line(tmp_path, no_ray_running):
    result = hpsearch_cmd("run", QUICKSTART, "--trials", "6", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    sweep = tmp_path / "runs" / "quickstart"
    trials = hpsearch.read_trials(sweep)
    # Two brackets by default (rungs 1 and 3 below max_t 6), which the sweep's copy of its
    # space holds for a resume; which trials a bracket stops depends on Tune's trial ids.
    assert yaml.safe_load((sweep / "space.yaml").read_text())["scheduler"]["brackets"] == 2
    assert len(trials) == 6 and "completed" in set(trials.status)
    assert set(trials.status) <= {"completed", "stopped_by_asha"}, trials
    out = result.stdout
    assert "sweep quickstart: finished" in out
    assert "rerun it:  hpsearch trial" in out and "--set lr=" in out
    assert "Configuration for experiment" not in out  # Ray's own tables stay out by default
    # The study holds exactly the table's trials, as they ended: ASHA's stops PRUNED with
    # their curve, the rest COMPLETE, none FAIL.
    study = assert_study_matches_tables(sweep, "quickstart")
    assert len(study.trials) == 6
    assert {t.state for t in study.trials} == {optuna.trial.TrialState.PRUNED,
                                               optuna.trial.TrialState.COMPLETE}

    # The same name again is refused, pointing at resume.
    again = hpsearch_cmd("run", QUICKSTART, cwd=tmp_path, timeout=120)
    assert again.returncode == 2 and "hpsearch resume quickstart" in again.stderr

    listing = hpsearch_cmd("ls", cwd=tmp_path, timeout=120)
    assert listing.returncode == 0
    assert "quickstart" in listing.stdout and "finished" in listing.stdout
    assert "6/6" in listing.stdout

    # The printed rerun command works and reproduces the best trial's parameters.
    rerun = next(ln for ln in out.splitlines() if ln.startswith("rerun it:"))
    args = rerun.split("hpsearch ", 1)[1].split() + ["--output", str(tmp_path / "one")]
    single = hpsearch_cmd(*args, cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    history = hpsearch.read_history(tmp_path / "one")
    assert list(history.epoch) == list(range(1, 7))
    assert {"lr", "val_loss", "train_loss", "grad_norm", "samples_per_s"} <= set(history)


SLOW_SPACE = """\
    name: slow
    trainable: gated:WORKLOAD
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
      batch_size: 16
    search: {algorithm: random, seed: 1}
    scheduler: {type: fifo, time_attr: epoch, max_t: 12}
    trials: {num: 6, max_concurrent: 2}
    resources: {workers: 1}
"""

#: digits, whose trials after the first train slowly (50 ms a batch, about a minute a
#: trial) until the test opens the gate: the first trial completes in seconds and the
#: next ones are still running when Ctrl-C comes, however fast or loaded the machine.
#: (Plain digits trials take 1-5 s; a sweep of them could end between two looks at the
#: tables, and the test then waited for a moment that had passed.)
GATED = """\
import os
import time
from pathlib import Path

from hpsearch.train import Workload, cross_entropy
from hpsearch.workloads import digits

GATE = Path({gate!r})
_slow = False


def build_data(config):
    global _slow
    n = 0  # this trial's start among all trials' (the gate's folder counts them)
    while True:
        try:
            os.close(os.open(GATE.parent / f"start-{{n}}", os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            n += 1
    _slow = n > 0
    return digits.build_data(config)


def loss(model, batch):
    if _slow and not GATE.exists():
        time.sleep(0.05)
    return cross_entropy(model, batch)


WORKLOAD = Workload(build_model=digits.build_model, build_data=build_data, loss=loss)
"""


@pytest.mark.ray
@pytest.mark.slow
def test_ctrl_c_writes_tables_exits_130_and_resume_finishes_the_sweep(tmp_path, session_ray,
                                                                       monkeypatch):
    """Ctrl-C once: the trials stop, the tables are written, the notify command still runs
    (and one that hangs is stopped after HPSEARCH_NOTIFY_TIMEOUT_S), exit 130; then
    `hpsearch resume` finishes the sweep."""
    space = tmp_path / "slow.yaml"
    space.write_text(textwrap.dedent(SLOW_SPACE))
    (tmp_path / "gate").mkdir()
    gate = tmp_path / "gate" / "open"
    (tmp_path / "gated.py").write_text(GATED.format(gate=str(gate)))
    sweep = tmp_path / "runs" / "slow"
    notify = f'env | grep ^HPSEARCH_ | sort > {tmp_path / "notified"}; sleep 600'
    # The driver's output goes to files, not pipes: a pipe nobody reads until the end can
    # fill and block the driver, and the files are there to show when the test fails.
    out_file, err_file = tmp_path / "run.out", tmp_path / "run.err"
    with open(out_file, "w") as out_f, open(err_file, "w") as err_f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpsearch", "run", str(space), "--notify", notify],
            cwd=tmp_path, stdout=out_f, stderr=err_f, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "HPSEARCH_NOTIFY_TIMEOUT_S": "5"},
        )
    try:
        deadline = time.monotonic() + 300  # only a hang takes this long
        done_before = None
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            if (sweep / "trials.parquet").exists():
                df = hpsearch.read_trials(sweep)
                if (df.status == "completed").sum() >= 1 and (df.status == "running").any():
                    done_before = df[df.status == "completed"].set_index("trial_id")
                    break
        assert done_before is not None, (
            f"no trial completed while another ran (driver exit {proc.poll()})\n"
            + out_file.read_text() + err_file.read_text())
        proc.send_signal(signal.SIGINT)
        pressed = time.monotonic()
        proc.wait(timeout=180)
    finally:
        proc.kill()
    out, err = out_file.read_text(), err_file.read_text()
    assert proc.returncode == 130, out + err
    assert "hpsearch resume slow" in err and "Traceback" not in err
    assert time.monotonic() - pressed < 120
    notified = dict(ln.split("=", 1) for ln in (tmp_path / "notified").read_text().splitlines())
    assert notified["HPSEARCH_STATUS"] == "interrupted" and notified["HPSEARCH_SWEEP"] == "slow"
    assert "ran past 5 s and was stopped" in err
    interrupted = hpsearch.read_trials(sweep)
    # Ctrl-C came before the sweep finished, and left trials to resume.
    assert (interrupted.status != "completed").any(), interrupted.status.tolist()

    gate.touch()  # the resumed trials train at full speed
    resumed = hpsearch_cmd("resume", "slow", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    trials = hpsearch.read_trials(sweep).set_index("trial_id")
    assert len(trials) == 6 and trials.index.is_unique
    assert (trials.status == "completed").all()
    for tid, row in done_before.iterrows():  # finished before Ctrl-C: kept, not rerun
        assert trials.loc[tid, "final_value"] == row.final_value
        assert trials.loc[tid, "ended_at"] == row.ended_at
    history = hpsearch.read_history(sweep)
    assert not history.duplicated(["trial_id", "step"]).any()
    for _, steps in history.groupby("trial_id").step:
        assert steps.is_monotonic_increasing
    # Every epoch of every trial is in the history once, the ones a running trial
    # checkpointed after Ctrl-C and before it was stopped included (recovered from beside
    # its checkpoint: the resume continued from there).
    for tid, epochs in history.groupby("trial_id").epoch:
        assert sorted(epochs) == list(range(1, 13)), (tid, sorted(epochs))
    monkeypatch.syspath_prepend(str(tmp_path))  # the space's trainable, gated.py
    try:
        study = assert_study_matches_tables(sweep, "slow")
    finally:
        sys.modules.pop("gated", None)
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 6


BOOM = '''
from hpsearch.workloads import digits
from hpsearch.train import Workload


def build_data(config):
    raise FileNotFoundError("no data at /data/train.bin: mount the dataset first")


WORKLOAD = Workload(build_model=digits.build_model, build_data=build_data)
'''


@pytest.mark.ray
@pytest.mark.slow
def test_failing_user_code_fails_its_trials_with_the_error_and_stops_the_sweep(
        tmp_path, session_ray):
    (tmp_path / "boom.py").write_text(BOOM)
    space = tmp_path / "boom.yaml"
    space.write_text(textwrap.dedent("""\
        trainable: boom:WORKLOAD
        objective: {metric: val_loss, mode: min}
        params:
          lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}
        scheduler: {type: fifo, max_t: 2}
        trials: {num: 8, max_concurrent: 1, max_failures: 0}
    """))
    result = hpsearch_cmd("run", str(space), cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stdout
    trials = hpsearch.read_trials(tmp_path / "runs" / "boom")
    assert len(trials) == 3  # the first 3 all failed: the other 5 never started
    assert (trials.status == "failed").all()
    assert trials.error.str.contains("FileNotFoundError: no data at /data/train.bin").all()
    manifest = (tmp_path / "runs" / "boom" / "manifest.json").read_text()
    assert '"status": "all_failed"' in manifest
