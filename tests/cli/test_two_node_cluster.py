"""One two-node cluster simulated on this machine (a head and a worker node, 2 CPUs and 2
declared GPUs each, token authentication, as `cluster.yaml` starts one), which the
module's tests share in this order (starting one costs ~30 s on 2 cores):

* ``hpsearch doctor`` names the node whose storage is not the shared one, and only it,
  once per problem; ``run --preflight`` stops before any trial. The worker node gets its
  storage through the test-only ``HPSEARCH_TEST_NODE_STORAGE``
  (hpsearch/driver/cluster/doctor_node.py), set in that node's `ray start` environment,
  which its tasks inherit: on one machine both nodes would otherwise see the same
  directory. Only the doctor reads it.
* A client without the token, or with a wrong one, gets one line saying so and what to
  do, in seconds, not Ray's 20 s of retries ending in "cannot connect".
* Several sweeps on one cluster: each keeps its own Tune state, they share the trial slots
  fairly while both run, the survivor gets the whole cluster, and both finish.
* The whole cluster loses power mid-sweep (last: it ends the cluster): a sweep runs as a
  Ray Job, submitted by docs/nightly.md's cluster line as written (`hpsearch submit`);
  once some trials have finished, every process of every node is killed at once, the
  job's driver with them. The cluster is started again and `hpsearch submit --resume`
  finishes the sweep as a Ray Job. Nothing finished is lost or run twice, the plan's
  trial count holds, and the Optuna study agrees with the tables. The documented line is
  checked on the way: a second submission the same day is not a second job, the job runs
  the cluster's installed hpsearch (never a copy in the uploaded project), and the
  manifest names the project's commit.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import hpsearch
from hpsearch.driver.cluster.doctor_node import TEST_NODE_STORAGE_ENV
from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import read_manifest

from .cluster import ray_cluster
from .nightly_doc import alerted, documented, home_with_alert
from .study_check import assert_study_matches_tables, open_study

QUICKSTART = Path(__file__).parents[2] / "search_spaces" / "quickstart.yaml"
NODES = [["--num-cpus=2", "--num-gpus=2"], ["--num-cpus=2", "--num-gpus=2"]]

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def unwritable_dir(parent: Path) -> str:
    if os.geteuid() == 0:  # root writes through permission bits; sysfs refuses everyone
        return "/sys"
    path = parent / "not-shared"
    path.mkdir(mode=0o555)
    return str(path)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory, stop_ray):
    """The module's cluster and its HOME (the head node's user, who installed the alert
    script: jobs run there). Its worker node's storage is not the shared one (for the
    doctor only). The power cut kills it."""
    stop_ray()
    root = tmp_path_factory.mktemp("two-nodes")
    home = home_with_alert(root)
    with ray_cluster(home, NODES, dashboard=True, token=True,
                     node_env={1: {TEST_NODE_STORAGE_ENV: unwritable_dir(root)}}) as cluster:
        yield home, cluster


def hpsearch_cmd(*args, env, cwd):
    return subprocess.run([sys.executable, "-m", "hpsearch", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_doctor_names_the_node_whose_storage_is_not_the_shared_one(tmp_path, two_nodes):
    _, cluster = two_nodes
    address = cluster.address
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {**cluster.env, "HPSEARCH_SIMULATE_GPU": "1"}  # the declared GPUs are not real
    out = hpsearch_cmd("doctor", "--address", address, "--storage", str(shared), "--nodes",
                       "2", env=env, cwd=tmp_path)
    print(out.stdout)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    headers = [ln for ln in lines if re.match(r"node [0-9a-f]{8} \(", ln)]
    assert len(headers) == 2 and headers[0].endswith("  head"), headers
    head, broken = (h.split()[1] for h in headers)

    problems = lines[lines.index("problems (2):") + 1:][:2]
    assert all(p.startswith(f"  node {broken} (") for p in problems), problems
    assert ": cannot write to " in problems[0] and "(trials write checkpoints" in problems[0]
    assert (f"does not see the marker file node {head} " in problems[1]
            and "not the same filesystem" in problems[1]), problems[1]
    assert not any(ln.startswith(f"  node {head}") for ln in lines), lines
    storage_lines = [ln for ln in lines if ln.strip().startswith("storage")]
    assert "writable, sees the marker" in storage_lines[0]
    assert "(test override)" in storage_lines[1] and "NOT writable" in storage_lines[1]
    assert not list(shared.iterdir())  # the marker is gone
    # A real all-reduce between the two nodes (gloo: their GPUs are declared, not real).
    assert any(re.match(r"an all-reduce over gloo between the 2 nodes \(rooted on [0-9.]+\): "
                        r"[0-9.]+ s$", ln) for ln in lines), lines

    # run --preflight stops there, before the sweep starts.
    space = tmp_path / "space.yaml"
    space.write_text(textwrap.dedent("""\
        name: pre
        trainable: digits
        objective: {metric: val_loss, mode: min}
        params: {lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}}
        trials: {num: 1}
    """))
    run = hpsearch_cmd("run", str(space), "--address", address, "--storage", str(shared),
                       "--preflight", env=env, cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith("error: hpsearch doctor found 2 problem(s); no trial was "
                                 "started:"), run.stderr
    assert len([ln for ln in run.stderr.splitlines() if ln.startswith(f"  node {broken}")]) == 2
    assert not (shared / "pre").exists()

def dry_run(address: str, env: dict, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "hpsearch", "run", str(QUICKSTART), "--dry-run",
                             "--address", address], env=env, cwd=cwd, capture_output=True,
                            text=True, timeout=120)
    return result, time.monotonic() - start


def test_token_mistakes_are_named(tmp_path, two_nodes):
    """A client without the cluster's token, or with a wrong one, gets the line that says
    which and what to do, not Ray's "cannot reach" (how fast Ray refuses it is Ray's:
    no wall-clock bound here, which a loaded machine could break)."""
    _, cluster = two_nodes
    no_token = {**cluster.env, "RAY_AUTH_MODE": "disabled"}
    result, _ = dry_run(cluster.address, no_token, tmp_path)
    assert result.returncode == 2, result.stderr[-500:]
    assert "requires token authentication" in result.stderr
    assert "export RAY_AUTH_MODE=token" in result.stderr
    assert "cannot reach" not in result.stderr

    wrong = {**cluster.env, "RAY_AUTH_TOKEN": "0" * 32}
    result, _ = dry_run(cluster.address, wrong, tmp_path)
    assert result.returncode == 2, result.stderr[-500:]
    assert "refused this client's token" in result.stderr
    assert "cannot reach" not in result.stderr

    result, _ = dry_run(cluster.address, cluster.env, tmp_path)  # the right token
    assert result.returncode == 0, result.stderr[-1000:]
    assert "dry run" in result.stdout


SPACE = """\
    name: {name}
    trainable: digits
    objective: {{metric: val_loss, mode: min}}
    params:
      lr: {{type: float, low: 1.0e-3, high: 3.0e-2, log: true}}
      batch_size: 8
    search: {{algorithm: random, seed: {seed}}}
    scheduler: {{type: fifo, max_t: {epochs}}}
    trials: {{num: {num}}}
"""


def start_sweep(tmp_path: Path, env: dict, address: str, name: str, *, num: int, epochs: int,
                seed: int) -> subprocess.Popen:
    space = tmp_path / f"{name}.yaml"
    space.write_text(textwrap.dedent(SPACE.format(name=name, num=num, epochs=epochs, seed=seed)))
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(space), "--address", address,
         "--storage", str(tmp_path / "runs")],
        cwd=tmp_path, env={**env, "PYTHONUNBUFFERED": "1", "HPSEARCH_LEDGER_EXPIRE_S": "8"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class ShareSampler(threading.Thread):
    """Samples the ledger once a second from a client of the cluster: shares and running
    trials per sweep, and the nodes trials ran on."""

    def __init__(self, address: str, env: dict, out: Path):
        super().__init__(daemon=True)
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(f"""
                import json, sys, time
                import ray
                from hpsearch.driver.limits.ledger import ledger_table
                from ray.util.state import list_actors
                ray.init(address={address!r}, logging_level="ERROR")
                start = time.time()
                with open({str(out)!r}, "w") as f:
                    while True:
                        rows = ledger_table() or []
                        nodes = sorted({{a.node_id for a in list_actors(
                            filters=[("state", "=", "ALIVE")], limit=1000)
                            if a.class_name == "ImplicitFunc"}})
                        f.write(json.dumps({{"t": round(time.time() - start, 1), "nodes": nodes,
                                             "sweeps": {{r["name"]: [r["share"], r["running"]]
                                                        for r in rows}},
                                             "wants": {{r["name"]: [r["share"], r["want"]]
                                                       for r in rows}}}}) + "\\n")
                        f.flush()
                        time.sleep(1)
            """)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> list[dict]:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]


def test_two_sweeps_share_a_two_node_cluster_fairly_and_both_finish(tmp_path, two_nodes):
    _, cluster = two_nodes
    sampler = ShareSampler(cluster.address, cluster.env, tmp_path / "shares.jsonl")
    # The short sweep's trials are a third as long as the long one's: on an idle machine,
    # 4 trials of 15 epochs took as long as the long sweep's 16 (the first trials of a
    # sweep pay its start-up), and both ended together, with no moment alone to look at.
    a = start_sweep(tmp_path, cluster.env, cluster.address, "short", num=4, epochs=5,
                    seed=1)
    # 16 trials: once the short sweep ends, the long one must still have more than the
    # 4 slots' worth to start (with 12, a loaded machine can leave it fewer by then).
    b = start_sweep(tmp_path, cluster.env, cluster.address, "long", num=16, epochs=15,
                    seed=2)
    try:
        out_a, _ = a.communicate(timeout=600)
        out_b, _ = b.communicate(timeout=600)
    finally:
        a.kill()
        b.kill()
        samples = sampler.stop()
    # The plan reads the nodes one by one: two workers fit on one node of 2 CPUs and
    # stay there; three fit on none and must spread.
    for workers, line in ((2, "each trial on one node (STRICT_PACK)"),
                          (3, "larger than any node")):
        plan = subprocess.run(
            [sys.executable, "-m", "hpsearch", "run", str(QUICKSTART), "--dry-run",
             "--address", cluster.address, "--set", f"resources.workers={workers}"],
            cwd=tmp_path, env=cluster.env, capture_output=True, text=True, timeout=120)
        assert plan.returncode == 0 and line in plan.stdout, plan.stdout + plan.stderr
    (tmp_path.parent / "shares-observed.jsonl").write_text(
        "\n".join(json.dumps(s) for s in samples))  # kept for the closing note
    assert a.returncode == 0, out_a[-3000:]
    assert b.returncode == 0, out_b[-3000:]
    for name, num in (("short", 4), ("long", 16)):  # as planned: not one trial more
        sweep = SweepDir(tmp_path / "runs" / name)
        trials = hpsearch.read_trials(sweep)
        assert len(trials) == num and (trials.status == "completed").all(), trials
        # Each sweep's Tune state holds its own trials only.
        folders = {p.name.split("_")[2] for p in sweep.tune.glob("hpsearch_trial_*")}
        assert folders == set(trials.trial_id), (name, folders)

    both = [s["sweeps"] for s in samples if len(s["sweeps"]) == 2
            and all(want > 1 for _, want in s["wants"].values())]
    alone = [s["sweeps"]["long"] for s in samples
             if list(s["sweeps"]) == ["long"] and s["wants"]["long"][1] >= 4]
    alone = alone[1:]  # the first sample may come before the short sweep's share returned
    assert both, samples
    # While both ran and each could use more than one slot: 2 slots each of the 4, and
    # neither ran more than its share (a sample may catch a trial that is just ending).
    assert all(v["short"][0] == 2 and v["long"][0] == 2 for v in both), both
    over = [v for v in both if v["short"][1] > 2 or v["long"][1] > 2]
    assert len(over) <= max(1, len(both) // 10), both
    # Once the short sweep ended, the long one had the whole cluster, and used it.
    assert alone, samples[-40:]
    assert all(share == 4 for share, _ in alone), alone
    assert max(running for _, running in alone) >= 3, alone
    # Trials ran on both nodes.
    assert len({n for s in samples for n in s["nodes"]}) == 2


NUM = 8
POWER_SPACE = f"""\
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
    (project / "search_spaces" / "gpu-ddp.yaml").write_text(textwrap.dedent(POWER_SPACE))
    (project / "hpsearch").mkdir()
    (project / "hpsearch" / "__init__.py").write_text("raise ImportError('the uploaded copy')\n")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "x",
                    "--allow-empty"], cwd=project, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True,
                            text=True).stdout.strip()
    return project, commit


def test_power_cut_of_the_whole_cluster_then_resume_as_a_job(tmp_path, two_nodes):
    project, commit = project_with_a_stale_copy(tmp_path)
    storage = tmp_path / "shared"  # NFS on a real cluster; one disk for nodes on one host
    name = f"lm-{datetime.now():%Y-%m-%d}"
    sweep = storage / name
    home, cluster = two_nodes
    line = documented("hpsearch submit search_spaces/gpu-ddp.yaml")
    line = line.replace("/mnt/shared/hpsearch-runs", shlex.quote(str(storage)))
    later = (datetime.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    line = line.replace("--deadline 07:00", f"--deadline {later}")
    started = time.monotonic()

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
    driver = read_manifest(SweepDir(sweep))["runs"][-1]["driver_pid"]
    assert driver in cluster.processes(), "the job's driver is not the cluster's"
    cluster.kill()  # the power cut: every node, every worker, the job's driver
    cut_at = time.monotonic()
    # What the tables say once nothing writes them any more (read while the sweep ran, the
    # trial table could be a write ahead of the history read after it).
    before = ended(sweep)
    history_before = hpsearch.read_history(sweep)
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
