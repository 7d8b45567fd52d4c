"""The GPU path without a GPU: a local Ray instance that declares 4 GPUs, and
``HPSEARCH_SIMULATE_GPU=1``, under which trials reserve and are assigned GPUs but train on
the CPU. What is checked is what hpsearch and Ray decide: how many trials run at once, which
GPU each worker gets, that GPUs come back, and the GPU-seconds charged.

Slow on 2 cores (Ray Train start-up); about 2 minutes for the module. One-worker trials
sharing GPUs (half a GPU each), and two GPU sweeps sharing the cluster:
``tests/cli/test_gpu_shared_cluster.py``."""

from __future__ import annotations

import io
import json
import time

import pytest

import hpsearch
from hpsearch.driver.cluster.preflight import SIMULATE_GPU_ENV
from hpsearch.driver.sweep.run import run_sweep
from hpsearch.space import parse_space

pytestmark = [pytest.mark.ray, pytest.mark.slow]

GPUS = 4


@pytest.fixture(scope="module")
def simulated_gpu_cluster(stop_ray):
    """A local Ray instance with 4 declared GPUs, started the way hpsearch starts one."""
    import os

    import ray

    from hpsearch.driver.cluster.connect import connect

    stop_ray()
    before = os.environ.get(SIMULATE_GPU_ENV)
    os.environ[SIMULATE_GPU_ENV] = "1"
    connect(None, num_gpus=GPUS)
    try:
        yield ray
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop(SIMULATE_GPU_ENV, None)
        else:
            os.environ[SIMULATE_GPU_ENV] = before


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
        scheduler={"type": "asha", "max_t": 4, "grace_period": 1, "reduction_factor": 2}))
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
