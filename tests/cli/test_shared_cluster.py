"""Several sweeps on one cluster: each keeps its own Tune state, they share the trial slots
fairly while both run, the survivor gets the whole cluster, and both finish. On a two-node
cluster simulated on this machine (a head and a worker node, 2 CPUs each)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import hpsearch
from hpsearch.store.layout import SweepDir

from .cluster import ray_cluster

QUICKSTART = Path(__file__).parents[2] / "search_spaces" / "quickstart.yaml"

pytestmark = [pytest.mark.ray, pytest.mark.slow]

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


def test_two_sweeps_share_a_two_node_cluster_fairly_and_both_finish(tmp_path, no_ray_running):
    with ray_cluster(tmp_path, [["--num-cpus=2"], ["--num-cpus=2"]], dashboard=True) as cluster:
        sampler = ShareSampler(cluster.address, cluster.env, tmp_path / "shares.jsonl")
        a = start_sweep(tmp_path, cluster.env, cluster.address, "short", num=4, epochs=15,
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

