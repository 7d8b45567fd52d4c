"""The whole cluster loses power mid-sweep: a two-node cluster (token auth) runs a sweep as
a Ray Job, submitted by docs/nightly.md's cluster line as written (`hpsearch submit`); once
some trials have finished, every process of every node is killed at once, the job's driver
with them. The cluster is started again and `hpsearch submit --resume` finishes the sweep
as a Ray Job. Nothing finished is lost or run twice, the plan's trial count holds, and the
Optuna study agrees with the tables.

The documented line is checked on the way: a second submission the same day is not a
second job, the job runs the cluster's installed hpsearch (never a copy in the uploaded
project), and the manifest names the project's commit."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import hpsearch
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import read_manifest

from .cluster import ray_cluster
from .nightly_doc import alerted, documented, home_with_alert
from .study_check import assert_study_matches_tables, open_study

pytestmark = [pytest.mark.ray, pytest.mark.slow]

NUM = 8
SPACE = f"""\
    name: gpu-ddp
    trainable: digits
    objective: {{metric: val_loss, mode: min}}
    params:
      lr: {{type: float, low: 1.0e-3, high: 3.0e-2, log: true}}
      batch_size: 16
    search: {{algorithm: tpe, seed: 3, n_startup_trials: 3}}
    scheduler: {{type: fifo, max_t: 6}}
    trials: {{num: {NUM}}}
"""
NODES = [["--num-cpus=2"], ["--num-cpus=2"]]


def cluster_env(cluster, home: Path, api: str) -> dict[str, str]:
    """A shell on the head node, as docs/nightly.md's script sets it up: the cluster's
    token in HOME, the Jobs API's address, hpsearch's console script on PATH."""
    env = {**cluster.env, "HOME": str(home), "RAY_API_SERVER_ADDRESS": api,
           "PYTHONUNBUFFERED": "1", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("RAY_ADDRESS", None)
    return env


def submit(project: Path, env: dict, api: str, *args: str) -> str:
    result = subprocess.run(
        # The console script, as a user runs it: `python -m` would import the project's copy.
        [str(Path(sys.executable).parent / "hpsearch"), "submit", *args, "--address", api],
        cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "submitted job" in result.stdout, result.stdout
    return result.stdout.split("submitted job ", 1)[1].split()[0]


def wait_for_job(api: str, env: dict, job: str, timeout: float = 240) -> tuple[str, str]:
    code = textwrap.dedent(f"""
        import time
        from ray.job_submission import JobSubmissionClient
        client = JobSubmissionClient({api!r})
        deadline = time.monotonic() + {timeout}
        while time.monotonic() < deadline:
            status = str(client.get_job_status({job!r}).value)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            time.sleep(1)
        print(client.get_job_logs({job!r})[-12000:])
        print("STATUS", status)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=timeout + 60).stdout
    logs, _, status = out.rpartition("STATUS ")
    return status.strip(), logs


def ended(sweep: Path):
    try:
        trials = hpsearch.read_trials(sweep)
    except Exception:  # noqa: BLE001 - not written yet
        return None
    return trials[~trials.status.isin(["running", "pending"])].set_index("trial_id")


def project_with_a_stale_copy(tmp_path: Path) -> tuple[Path, str]:
    """The project the documented line is run from: its space as
    ``search_spaces/gpu-ddp.yaml``, a stale copy of hpsearch that would fail the job if it
    were uploaded and imported, and a git commit. Returns it and the commit."""
    project = tmp_path / "project"
    (project / "search_spaces").mkdir(parents=True)
    (project / "search_spaces" / "gpu-ddp.yaml").write_text(textwrap.dedent(SPACE))
    (project / "hpsearch").mkdir()
    (project / "hpsearch" / "__init__.py").write_text("raise ImportError('the uploaded copy')\n")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "x",
                    "--allow-empty"], cwd=project, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True,
                            text=True).stdout.strip()
    return project, commit


def test_power_cut_of_the_whole_cluster_then_resume_as_a_job(tmp_path, no_ray_running):
    project, commit = project_with_a_stale_copy(tmp_path)
    storage = tmp_path / "shared"  # NFS on a real cluster; one disk for nodes on one host
    name = f"lm-{datetime.now():%Y-%m-%d}"
    sweep = storage / name
    # The head node's user is the one who installed the alert script: jobs run there.
    home = home_with_alert(tmp_path)
    line = documented("hpsearch submit search_spaces/gpu-ddp.yaml")
    line = line.replace("/mnt/shared/hpsearch-runs", shlex.quote(str(storage)))
    later = (datetime.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    line = line.replace("--deadline 07:00", f"--deadline {later}")
    started = time.monotonic()

    with ray_cluster(home, NODES, dashboard=True, token=True) as cluster:
        api = f"http://127.0.0.1:{cluster.dashboard_port}"
        env = cluster_env(cluster, home, api)
        # As a user's shell runs it: the console script ($HOME expanded there).
        first = subprocess.run(["bash", "-c", line], cwd=project, env=env,
                               capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"submitted job {name}" in first.stdout and "ray job logs" in first.stdout
        again = subprocess.run(["bash", "-c", line], cwd=project, env=env,
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and "already submitted" in again.stdout, again.stdout
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            done = ended(sweep)
            if done is not None and len(done) >= 2 and len(done) <= NUM - 2:
                break
            time.sleep(0.3)
        else:
            pytest.fail(f"no two trials ended in time: {wait_for_job(api, env, name, 1)}")
        before = ended(sweep)
        history_before = hpsearch.read_history(sweep)
        driver = read_manifest(SweepDir(sweep))["runs"][-1]["driver_pid"]
        assert driver in cluster.processes(), "the job's driver is not the cluster's"
        cluster.kill()  # the power cut: every node, every worker, the job's driver
        cut_at = time.monotonic()
    assert len(before) < NUM, "the sweep finished before the cut"

    with ray_cluster(home, NODES, dashboard=True, token=True) as cluster:
        api = f"http://127.0.0.1:{cluster.dashboard_port}"
        env = cluster_env(cluster, home, api)
        job = submit(project, env, api, "--resume", name, "--storage", str(storage),
                     "--report", "--notify", str(home / ".local" / "bin" / "hpsearch-alert"))
        assert job == f"{name}-resume-{datetime.now():%Y-%m-%d}"
        status, logs = wait_for_job(api, env, job)
    assert status == "SUCCEEDED", logs
    print(f"power cut after {cut_at - started:.0f} s with {len(before)} trials ended; "
          f"whole test {time.monotonic() - started:.0f} s")

    trials = hpsearch.read_trials(sweep).set_index("trial_id")
    folders = [p.name.split("_")[2] for p in sweep.glob("tune-*/hpsearch_trial_*")]
    study = open_study(sweep, name)
    story = (f"folders {sorted(folders)}\nrows {trials[['status', 'optuna_trial']]}\n"
             f"study {[(t.number, t.state.name, t.user_attrs.get('trial_id')) for t in study.trials]}"
             f"\nbefore {before[['status']]}\nlogs {logs[-3000:]}")
    assert len(trials) == NUM and trials.index.is_unique, story
    # the trials running at the cut were continued by the resumed job and completed
    assert set(trials.status) == {"completed"}, trials.status
    for tid, row in before.iterrows():  # ended before the cut: kept, not run again
        assert trials.loc[tid, "status"] == row.status
        assert trials.loc[tid, "final_value"] == row.final_value
    history = hpsearch.read_history(sweep)
    # (epoch too: a report recovered from the study has no step; docs/trial-tables.md)
    assert not history.duplicated(["trial_id", "step", "epoch"]).any()
    for tid in before.index:
        assert len(history[history.trial_id == tid]) == \
            len(history_before[history_before.trial_id == tid]), tid
    # Every trial Tune ran has its row (none lost), and the study agrees with the tables.
    # A trial continued after the cut has a folder in each run's Tune directory.
    assert set(folders) <= set(trials.index), story
    assert_study_matches_tables(sweep, name, history_may_lag=True)
    manifest = read_manifest(SweepDir(sweep))
    assert manifest["status"] == "finished" and len(manifest["runs"]) == 2
    assert manifest["git"]["commit"] == commit
    assert (sweep / "report.html").exists()
    alert = alerted(home)  # on the head node, by the resumed job that finished the sweep
    assert alert["HPSEARCH_SWEEP"] == name and alert["HPSEARCH_STATUS"] == "finished", alert
    # Each row a trial that trained. A row may lack its Tune folder: Tune writes trial
    # folders on the driver's node (/tmp/ray/session_*/artifacts) and copies them into the
    # sweep every few seconds, so a trial that ended after the last copy before the cut
    # has none. Such a trial trained under the killed driver: its reports are in the
    # study. A row whose trial never trained would take a planned trial's place.
    trained = {t.user_attrs.get("trial_id") for t in study.trials if t.intermediate_values}
    without_folder = set(trials.index) - set(folders)
    assert without_folder <= trained, f"rows of trials that never trained: " \
        f"{sorted(without_folder - trained)}\n{story}"
