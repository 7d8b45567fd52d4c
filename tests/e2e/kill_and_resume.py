"""The quickstart sweep, its driver SIGKILLed mid-sweep, then `hpsearch resume`: run with
the Python of the environment under test (tests/e2e/ray_range.sh runs it for each Ray and
Optuna version the package declares). Exit 0 when the resumed sweep holds every planned
trial once, the trials running at the kill continued from their checkpoints, and the
study agrees with the tables; otherwise one line says what is wrong, and exit 1.

    python tests/e2e/kill_and_resume.py WORKDIR
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPACE = (REPO / "search_spaces" / "quickstart.yaml").read_text()
# The quickstart's trials with longer epochs (batch 8), so that the kill lands mid-sweep.
SPACE = SPACE.replace("batch_size: 64", "batch_size: 8").replace("max_t: 6,", "max_t: 9,")


def fail(message: str) -> None:
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def main(workdir: Path) -> None:
    import hpsearch
    import optuna
    import ray

    workdir.mkdir(parents=True, exist_ok=True)
    space = workdir / "quickstart.yaml"
    space.write_text(SPACE)
    sweep = workdir / "runs" / "quickstart"
    env = {**os.environ, "RAY_ADDRESS": "local", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "hpsearch"]
    started = time.monotonic()
    proc = subprocess.Popen([*cmd, "run", str(space)], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    running = set()
    while time.monotonic() - started < 300:
        time.sleep(0.2)
        try:
            trials = hpsearch.read_trials(sweep)
        except Exception:  # noqa: BLE001 - not written yet
            continue
        ended = trials[~trials.status.isin(["running", "pending"])]
        running = set(trials.trial_id[(trials.status == "running") & (trials.epochs >= 1)])
        if len(ended) >= 2 and running:
            break
        if proc.poll() is not None:
            fail("the sweep ended before the kill")
    else:
        fail("no moment with two trials ended and one running with a checkpoint")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    checkpoints = {t: max(int(p.name.split("_")[1]) for p in (sweep / "checkpoints" / t).glob(
        "checkpoint_*")) for t in running if any((sweep / "checkpoints" / t).glob("checkpoint_*"))}
    resumed = subprocess.run([*cmd, "resume", "quickstart"], cwd=workdir, env=env,
                             capture_output=True, text=True, timeout=900)
    if resumed.returncode != 0:
        fail(f"resume exited {resumed.returncode}: {resumed.stderr.strip().splitlines()[-1:]}")
    trials = hpsearch.read_trials(sweep)
    if len(trials) != 8 or not trials.trial_id.is_unique:
        fail(f"{len(trials)} rows for 8 planned trials")
    if not set(trials.status) <= {"completed", "stopped_by_asha"}:
        fail(f"statuses {sorted(set(trials.status))}")
    runs = sorted(p for p in sweep.glob("tune-*") if p.is_dir())
    per_epoch = int(hpsearch.read_history(sweep).query("epoch == 1").step.iloc[0])
    for trial_id, step in checkpoints.items():
        progress = list(runs[-1].glob(f"hpsearch_trial_{trial_id}_*/progress.csv"))
        with open(progress[0]) as f:
            first = int(next(csv.DictReader(f))["step"])
        if first < step + per_epoch:
            fail(f"trial {trial_id} restarted at step {first}, its checkpoint was at {step}")
    study = optuna.load_study(study_name="quickstart", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(sweep / "optuna.journal"))))
    linked = {t.user_attrs.get("trial_id"): t for t in study.trials}
    if set(linked) != set(trials.trial_id) or any(
            t.state == optuna.trial.TrialState.RUNNING for t in study.trials):
        fail("the study does not hold exactly the table's trials, all ended")
    print(f"PASS: Ray {ray.__version__}, Optuna {optuna.__version__}: 8 trials, "
          f"{len(checkpoints)} continued from their checkpoints, "
          f"{time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
