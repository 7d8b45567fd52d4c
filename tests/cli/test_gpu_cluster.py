"""A simulated 4-GPU cluster (`ray start --head --num-gpus 4` on a machine without GPUs),
which the module's tests share (starting one costs 10-30 s on 2 cores). Under
``HPSEARCH_SIMULATE_GPU=1`` trials reserve and are assigned GPUs but train on the CPU:
what is checked is what hpsearch and Ray decide (how many trials run at once, which GPU
each worker gets, that GPUs come back, the GPU-seconds charged).

A GPU sweep whose torch cannot use CUDA (a CPU build, or a CUDA build that does not match
the driver) ends before its first trial with one line and exit 2, instead of failing trial
after trial while the failed ones hold the GPUs (no ``HPSEARCH_SIMULATE_GPU``).

Two GPU sweeps sharing the cluster (``HPSEARCH_SIMULATE_GPU=1`` in the sweeps' drivers).
``half``: 2 one-worker trials at half a GPU each (several trials may share a GPU; the two
workers of one trial may not, docs/space-format.md); ``whole``: 2 trials of 2 workers at a
GPU each (2 GPUs a trial). Alone, ``whole`` could run both its trials at once; together
they ask for 5 of the 4 GPUs, so the ledger splits the cluster: ``half`` both its trials,
``whole`` 1 of its 2. ``whole`` starts once ``half`` runs, so no trial waits for GPUs
another sweep took before its share was known (which the ledger allows: shares only delay
new trials).

Checked: both finish; each worker of a ``whole`` trial trains on its own GPU (its own
``cuda:N`` in the ``CUDA_VISIBLE_DEVICES`` Ray Train gives both), a ``half`` trial in its
Tune actor on the GPU it sees alone, as ``cuda:0``; sampled every second: the shares split
while both sweeps run, never more GPUs shared out, asked for by running trials or reserved
by trials' worker groups than the 4, and no sweep holding GPUs for more trials than its
share; ``gpu_s`` is wall time x GPUs held; all 4 GPUs and every placement group are free at
the end. The first sweep runs with ``--preflight``: ``hpsearch doctor`` passes the cluster
and the sweep starts. About 2 minutes on 2 cores.

Trial start and end times are not used to tell which trials held GPUs at once: they are
the driver's, and include Ray Train's start-up, during which a trial holds no GPU yet."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import hpsearch
from hpsearch.driver.cluster.preflight import SIMULATE_GPU_ENV
from hpsearch.driver.sweep.run import run_sweep
from hpsearch.driver.trials.gpus import cuda_device_index
from hpsearch.space import parse_space
from hpsearch.store.layout import SweepDir

from .cluster import ray_cluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory, stop_ray):
    import ray

    stop_ray()
    with ray_cluster(tmp_path_factory.mktemp("gpu-cluster"),
                     [["--num-cpus=2", f"--num-gpus={GPUS}"]], dashboard=True) as cluster:
        try:
            yield cluster
        finally:
            ray.shutdown()  # the in-process tests' connection


@pytest.fixture
def simulated_gpu_cluster(gpu_cluster, monkeypatch):
    """This process, a driver with ``HPSEARCH_SIMULATE_GPU=1``, joined to the module's
    cluster (it stays joined until the module ends)."""
    import ray

    from hpsearch.driver.cluster.connect import connect

    monkeypatch.setenv(SIMULATE_GPU_ENV, "1")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        connect(gpu_cluster.address)
    yield ray


CPU_TORCH_SPACE = """\
    name: gpu
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 3.0e-2, log: true}
    scheduler: {type: fifo, max_t: 2}
    trials: {num: 4}
    resources: {workers: 2, use_gpu: true, cpus_per_worker: 0.5}
"""


def test_gpu_sweep_with_a_cpu_torch_fails_before_any_trial(tmp_path, gpu_cluster):
    space = tmp_path / "gpu.yaml"
    space.write_text(textwrap.dedent(CPU_TORCH_SPACE))
    result = subprocess.run(
        [sys.executable, "-m", "hpsearch", "run", str(space), "--address", gpu_cluster.address],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=gpu_cluster.env,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: resources.use_gpu is true but node")
    assert "a CPU build of torch" in errors[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "runs" / "gpu" / "trials.parquet").exists()

GPUS = 4
#: name -> (gpus_per_worker, trials, workers per trial, scheduler, epochs): ``half``'s
#: one-worker trials start in a second, so they train for 40 s (of an epoch budget they never
#: reach), to be running when ``whole`` has started.
SWEEPS = {"half": (0.5, 2, 1, "{type: fifo, time_attr: time, max_t: 40}", "epochs: 1000"),
          "whole": (1, 2, 2, "{type: fifo, max_t: 1}", "")}

SPACE = """\
    name: {name}
    trainable: digits
    objective: {{metric: val_loss, mode: min}}
    params:
      lr: {{type: float, low: 1.0e-3, high: 3.0e-2, log: true}}
      {epochs}
    search: {{algorithm: random, seed: 0}}
    scheduler: {scheduler}
    trials: {{num: {num}, max_failures: 0}}
    resources: {{workers: {workers}, use_gpu: true, gpus_per_worker: {gpus}, cpus_per_worker: 0.25}}
"""

SAMPLER = """\
import json, sys, time
import ray
from ray.util import placement_group_table
from hpsearch.driver.limits.ledger import ledger_table
ray.init(address=sys.argv[1], logging_level="ERROR")
with open(sys.argv[2], "w") as f:
    while True:
        rows = ledger_table() or []
        groups = [g for g in placement_group_table().values() if g["state"] != "REMOVED"]
        f.write(json.dumps({
            "t": time.time(), "free_gpus": ray.available_resources().get("GPU", 0.0),
            "groups": len(groups),
            "gpu_groups": [[b.get("GPU", 0.0) for b in g["bundles"].values()]
                           for g in groups if g["state"] == "CREATED"
                           and any(b.get("GPU") for b in g["bundles"].values())],
            "sweeps": {r["name"]: {"share": r["share"], "running": r["running"],
                                   "want": r["want"], "gpus": r["demand"].get("GPU", 0)}
                       for r in rows}}) + "\\n")
        f.flush()
        time.sleep(1)
"""


def start_sweep(tmp_path: Path, env: dict, address: str, name: str,
                *options: str) -> subprocess.Popen:
    gpus, num, workers, scheduler, epochs = SWEEPS[name]
    space = tmp_path / f"{name}.yaml"
    space.write_text(textwrap.dedent(SPACE.format(name=name, gpus=gpus, num=num, workers=workers,
                                                  scheduler=scheduler, epochs=epochs)))
    return subprocess.Popen(
        [sys.executable, "-m", "hpsearch", "run", str(space), "--address", address,
         "--storage", str(tmp_path / "runs"), *options],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def read_samples(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.endswith("}")]


def wait_for(path: Path, sampler: subprocess.Popen, ready, timeout: float = 300.0) -> None:
    """Until a sample of ``path`` is ``ready``."""
    deadline = time.monotonic() + timeout
    while not any(ready(s) for s in read_samples(path)):
        assert sampler.poll() is None, (path.parent / "sampler.log").read_text()[-2000:]
        assert time.monotonic() < deadline, read_samples(path)[-5:]
        time.sleep(0.5)


def workers_of(history, trial_id: str) -> list[tuple[str, str]]:
    """``[(gpu_id, CUDA_VISIBLE_DEVICES)]`` of a trial's workers, in rank order."""
    rows = history[history.trial_id == trial_id]
    [(ids, visible)] = set(zip(rows.gpu_ids, rows.cuda_visible_devices))
    return list(zip(ids.split(";"), visible.split(";")))


def worker_groups(sample: dict) -> dict[str, int]:
    """The trials holding GPUs in a sample, per sweep: their placement groups (a ``whole``
    trial's workers', a ``half`` trial's Tune actor's), told apart by the GPU of each
    bundle (1 in ``whole``, 0.5 in ``half``)."""
    per_worker = {gpus: name for name, (gpus, *_) in SWEEPS.items()}
    out = {name: 0 for name in SWEEPS}
    for bundles in sample["gpu_groups"]:
        out[per_worker[max(bundles)]] += 1
    return out


def test_two_gpu_sweeps_split_the_gpus_and_give_them_all_back(tmp_path, gpu_cluster):
    samples_file = tmp_path / "samples.jsonl"
    cluster = gpu_cluster
    with open(tmp_path / "sampler.log", "w") as log:
        env = {**cluster.env, "HPSEARCH_SIMULATE_GPU": "1", "PYTHONUNBUFFERED": "1"}
        sampler = subprocess.Popen(
            [sys.executable, "-c", SAMPLER, cluster.address, str(samples_file)],
            env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
        procs: dict[str, subprocess.Popen] = {}
        outputs: dict[str, str] = {}
        try:
            # The first with --preflight: the doctor passes a healthy cluster, then it runs.
            procs["half"] = start_sweep(tmp_path, env, cluster.address, "half", "--preflight")
            wait_for(samples_file, sampler,
                     lambda s: s["sweeps"].get("half", {}).get("running", 0) >= 1)
            procs["whole"] = start_sweep(tmp_path, env, cluster.address, "whole")
            for name, proc in procs.items():
                try:
                    outputs[name], _ = proc.communicate(timeout=600)
                except subprocess.TimeoutExpired as exc:
                    out = exc.output.decode() if isinstance(exc.output, bytes) else exc.output
                    trials = hpsearch.read_trials(SweepDir(tmp_path / "runs" / name))
                    pytest.fail(f"sweep {name} did not end in 600 s:\n{(out or '')[-3000:]}\n"
                                f"{trials.to_string()}\n{read_samples(samples_file)[-3:]}")
            # Every GPU and placement group free again (Ray frees a trial's shortly after
            # it ends).
            ended = time.time()
            wait_for(samples_file, sampler, lambda s: (s["t"] > ended and not s["sweeps"]
                                                       and s["free_gpus"] == GPUS
                                                       and not s["groups"]), timeout=60)
        finally:
            for proc in [*procs.values(), sampler]:
                proc.kill()
                proc.wait()
    samples = read_samples(samples_file)
    for name, proc in procs.items():
        assert proc.returncode == 0, outputs[name][-3000:]
        assert "SIMULATED GPUs" in outputs[name]
    lines = outputs["half"].splitlines()
    [doctor] = [ln for ln in lines if ln.startswith("hpsearch doctor: ")]
    assert doctor.startswith("hpsearch doctor: 1 node(s), storage "), doctor
    assert doctor.endswith("[SIMULATED GPUs: CUDA and NCCL not required]"), doctor
    assert "no problems found" in lines, outputs["half"][-3000:]

    # The shares: while both ran, half got what it wanted (its trials, 1 GPU) and whole 1
    # trial (2 GPUs) of the 2 it wanted; never more GPUs shared out than there
    # are; and trials of both sweeps ran at the same time.
    both = [s["sweeps"] for s in samples if len(s["sweeps"]) == 2]
    split = [s for s in both if s["whole"]["want"] == 2 and s["half"]["want"] >= 1]
    assert split, samples
    assert all(s["whole"]["share"] == 1 and s["half"]["share"] == s["half"]["want"]
               for s in split), split
    assert all(sum(r["share"] * r["gpus"] for r in s.values()) <= GPUS for s in both), both
    # Each sweep reports its running trials every few seconds, so a sample can catch one
    # sweep's report from just before a trial ended.
    over = [s for s in both if sum(r["running"] * r["gpus"] for r in s.values()) > GPUS]
    assert len(over) <= max(1, len(both) // 10), both
    assert any(s["half"]["running"] >= 1 and s["whole"]["running"] >= 1 for s in both), both

    # What Ray reserved, sampled: never more than the 4 GPUs; both sweeps' worker groups
    # did hold GPUs (the simulation reserves them); while both sweeps ran, neither held
    # GPUs for more trials than its share (a sample may catch a share just changing).
    assert all(sum(map(sum, s["gpu_groups"])) <= GPUS and s["free_gpus"] >= 0
               for s in samples), samples
    groups = [worker_groups(s) for s in samples]
    assert max(g["half"] for g in groups) == 2 and max(g["whole"] for g in groups) >= 1, groups
    beyond = [(s["sweeps"], g) for s, g in zip(samples, groups) if len(s["sweeps"]) == 2
              and any(g[name] > s["sweeps"][name]["share"] for name in SWEEPS)]
    assert len(beyond) <= 2, beyond
    print(f"samples with GPUs held by both sweeps' trials at once: "
          f"{sum(1 for g in groups if g['half'] and g['whole'])} of {len(samples)}")

    for name, (per_worker, num, workers, *_) in SWEEPS.items():
        sweep = SweepDir(tmp_path / "runs" / name)
        trials = hpsearch.read_trials(sweep)
        history = hpsearch.read_history(sweep)
        assert len(trials) == num and (trials.status == "completed").all(), trials
        assert (trials.gpu_s - workers * per_worker * trials.wall_s).abs().max() < 1e-6
        assert (trials.gpu_s > 0).all()
        for trial in trials.itertuples():
            ranks = workers_of(history, trial.trial_id)
            assert len(ranks) == workers, ranks
            ids = [gpu for gpu, _ in ranks]
            devices = [cuda_device_index([gpu], visible) for gpu, visible in ranks]
            assert set(ids) <= {str(i) for i in range(GPUS)}, ranks
            if name == "whole":  # a GPU each; each worker trains on its own cuda:N
                assert len(set(ids)) == 2 and None not in devices, ranks
                assert len(set(devices)) == 2, ranks
            else:  # the Tune actor's share of one GPU, which it alone sees, as cuda:0
                assert [visible for _, visible in ranks] == ids and devices == [0], ranks


# In-process sweeps (run_sweep) on the same cluster.

def gpu_space(name: str, *, workers: int, gpus_per_worker: float, num: int,
              scheduler: dict) -> dict:
    return {
        "name": name,
        "trainable": "digits",
        "objective": {"metric": "val_loss", "mode": "min"},
        "params": {"lr": {"type": "float", "low": 1e-4, "high": 0.3, "log": True}},
        "search": {"algorithm": "random", "seed": 0},
        "scheduler": scheduler,
        "trials": {"num": num, "max_concurrent": "auto", "max_failures": 0},
        "resources": {"workers": workers, "use_gpu": True, "gpus_per_worker": gpus_per_worker,
                      "cpus_per_worker": 0.25},
    }


def run(tmp_path, space: dict):
    out = io.StringIO()
    result = run_sweep(parse_space(space), storage=str(tmp_path), stream=out)
    trials = hpsearch.read_trials(result.sweep_dir)
    history = hpsearch.read_history(result.sweep_dir)
    return result, trials, history, out.getvalue()


def workers_gpus(history, trial_id: str) -> list[tuple[str, str]]:
    """``[(gpu_ids, cuda_visible_devices)]`` of a trial's workers, in rank order (the same
    in every report of the trial)."""
    rows = history[history.trial_id == trial_id]
    pairs = {(g, v) for g, v in zip(rows.gpu_ids, rows.cuda_visible_devices)}
    assert len(pairs) == 1, pairs
    ids, visible = pairs.pop()
    return list(zip(ids.split(";"), visible.split(";")))


def overlapping(trials) -> list[tuple[str, str]]:
    rows = list(trials[["trial_id", "started_at", "ended_at"]].itertuples(index=False))
    return [(a.trial_id, b.trial_id) for i, a in enumerate(rows) for b in rows[i + 1:]
            if a.started_at < b.ended_at and b.started_at < a.ended_at]


def most_at_once(trials) -> int:
    events = sorted([(t, 1) for t in trials.started_at] + [(t, -1) for t in trials.ended_at])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def gpus_return(ray, timeout: float = 30.0) -> None:
    """All GPUs (and CPUs) free again and no placement group left."""
    from ray.util import placement_group_table

    deadline = time.monotonic() + timeout
    while True:
        groups = [g for g in placement_group_table().values() if g["state"] != "REMOVED"]
        free, total = ray.available_resources(), ray.cluster_resources()
        if not groups and free.get("GPU") == GPUS and free.get("CPU") == total.get("CPU"):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"GPUs not given back: free {free} of {total}, groups "
                                 f"{[(g['name'], g['state']) for g in groups]}")
        time.sleep(0.5)


def test_two_worker_trials_run_two_at_once_each_worker_on_its_own_gpu(
        tmp_path, simulated_gpu_cluster):
    result, trials, history, out = run(tmp_path, gpu_space(
        "gpu-ddp", workers=2, gpus_per_worker=1, num=4,
        scheduler={"type": "asha", "max_t": 4, "grace_period": 1, "reduction_factor": 2,
                   "brackets": 1}))
    assert result.status == "finished", trials[["status", "error"]]

    # max_concurrent: auto counts GPUs: the CPUs would fit 4 trials, the 4 GPUs fit 2.
    assert result.plan.slots == 2
    assert most_at_once(trials) == 2
    assert "SIMULATED GPUs" in out
    manifest = json.loads((result.sweep_dir / "manifest.json").read_text())
    assert manifest["simulated_gpu"] is True and manifest["runs"][-1]["simulated_gpu"] is True

    # Each worker its own GPU, which its CUDA_VISIBLE_DEVICES shows (Ray Train shows a
    # node's workers all of the trial's GPUs there); trials at once hold different GPUs.
    held = {}
    for trial_id in trials.trial_id:
        workers = workers_gpus(history, trial_id)
        ids = [gpu for gpu, _ in workers]
        assert len(ids) == 2 and len(set(ids)) == 2, workers
        assert all(gpu in visible.split(",") for gpu, visible in workers), workers
        assert set(ids) <= {str(i) for i in range(GPUS)}
        held[trial_id] = set(ids)
    assert overlapping(trials)
    for a, b in overlapping(trials):
        assert not held[a] & held[b], (held[a], held[b])

    # ASHA stopped some trials; their GPUs came back: the later trials could start (all
    # four GPUs were held by the first two), and all 4 are free at the end.
    assert (trials.status == "stopped_by_asha").sum() >= 1, trials[["status", "epochs"]]
    assert set(trials.status) <= {"completed", "stopped_by_asha"}
    gpus_return(simulated_gpu_cluster)

    # GPU-seconds: the trial's wall time x the 2 GPUs it held.
    assert (trials.gpu_s - 2 * trials.wall_s).abs().max() < 1e-6
    assert (trials.gpu_s > 0).all()
    # They trained on the CPU: no GPU to sample, so every row's utilisation is null (and
    # the column is there, through Ray Train's reports and the tables).
    assert history.gpu_util_pct.isna().all() and len(history) >= 4


def test_one_worker_trial_holds_its_gpu_in_the_tune_actor(tmp_path, simulated_gpu_cluster):
    result, trials, history, out = run(tmp_path, gpu_space(
        "gpu-one", workers=1, gpus_per_worker=1, num=4,
        scheduler={"type": "fifo", "max_t": 2}))
    assert result.status == "finished", trials[["status", "error"]]
    assert result.plan.slots == 4 and "SIMULATED GPUs" in out
    held = {}
    for trial_id in trials.trial_id:
        # Reported by the harness inside the Tune trial's actor: Ray gave that actor the
        # GPU, and it sees that GPU only.
        [(gpu, visible)] = workers_gpus(history, trial_id)
        assert visible == gpu and gpu in {str(i) for i in range(GPUS)}
        held[trial_id] = gpu
    assert overlapping(trials), "no two trials ran at once: nothing about sharing was tested"
    for a, b in overlapping(trials):
        assert held[a] != held[b]
    assert (trials.gpu_s - trials.wall_s).abs().max() < 1e-6
    gpus_return(simulated_gpu_cluster)
