"""The ``dehb`` replay method (``benchmarks/replay/dehb_method.py``, #38): DEHB's own
ask/tell, each job a trial the replay runs to the job's fidelity and no further, told back
with the value there. Skipped where DEHB is not installed (hpsearch's ``bench`` extra)."""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

pytest.importorskip("dehb")

from benchmarks.replay import cli  # noqa: E402
from benchmarks.replay.methods import build  # noqa: E402
from benchmarks.replay.simulator import simulate  # noqa: E402
from hpsearch.driver.search.space import inside  # noqa: E402

# DEHB 0.1.2 calls ConfigSpace's pre-1.0 names, which ConfigSpace 1.x still answers.
pytestmark = pytest.mark.filterwarnings("ignore:Please:DeprecationWarning")


@pytest.fixture(scope="module")
def digits():
    return cli.load(*cli.WORKLOADS["digits"])  # spec, table, surrogate


def test_each_job_is_a_trial_stopped_at_its_fidelity_and_told_its_value_there(digits):
    """On digits (``max_t: 6``, ``reduction_factor: 3``) DEHB's fidelities are 2 and 6
    epochs: every ended trial ran exactly its job's fidelity, DEHB heard each one with the
    value of that epoch, and the low-fidelity jobs were stopped there, not run on."""
    import ray

    spec, table, surrogate = digits
    run_spec, driver = build("dehb", spec, seed=1, workers=4)
    assert list(driver.optimizer.fidelities) == [2.0, 6.0]
    row = simulate("dehb", table, surrogate, run_spec, seed=1, workers=4, budget=3.0,
                   driver=driver)
    assert not ray.is_initialized()
    history = driver.optimizer.history  # (config_id, vector, fitness, cost, fidelity, info)
    told = Counter(int(fidelity) for *_, fidelity, _ in history)
    ran = Counter(epochs for _, epochs, _ in row["ended"])
    assert ran == told and told[2] > 0 and told[6] > 0
    assert len(history) == len(row["ended"]) >= 12
    assert row["stopped"] == told[2]  # a 2-epoch job is a trial stopped at epoch 2
    seen = {value for _, value in row["curve"]}
    fitness = [f for _, _, f, *_ in history]
    assert all(math.isfinite(f) and f >= table.best() for f in fitness)
    # DEHB hears a job's value at its fidelity; the replay also saw the epochs before it.
    assert driver.optimizer.inc_score == min(fitness) >= min(seen)
    assert sum(row["worker_time"].values()) == pytest.approx(4 * 3.0)  # never idle
    again = simulate("dehb", table, surrogate, spec, seed=1, workers=4, budget=3.0)
    assert again["curve"] == row["curve"] and again["ended"] == row["ended"]


def test_the_space_files_parameters_become_dehbs_config_space():
    """charlm's space: a log float, a stepped int, a categorical, a parameter sampled
    only with fp16, a linear float. Every configuration DEHB asks for is one hpsearch's
    define-by-run space could suggest, the fp16 loss scale present exactly with fp16."""
    import ConfigSpace as CS

    from benchmarks.replay.dehb_method import config_space

    spec, _, _ = cli.load(*cli.WORKLOADS["charlm"])
    cs = config_space(spec)
    assert set(cs) == {p.name for p in spec.params}
    assert isinstance(cs["lr"], CS.UniformFloatHyperparameter) and cs["lr"].log
    assert list(cs["warmup_steps"].sequence) == [0, 16, 32, 48, 64]
    assert list(cs["precision"].choices) == ["fp32", "bf16", "fp16"]
    assert not cs["weight_decay"].log
    _, driver = build("dehb", spec, seed=0, workers=4)
    params = {p.name: p for p in spec.params}
    precisions = set()
    for n in range(40):  # the first bracket and into the next ones
        key, config = driver.start(f"t{n}")
        assert all(inside(params[name], value) for name, value in config.items()), config
        assert ("loss_scale_init" in config) == (config["precision"] == "fp16"), config
        precisions.add(config["precision"])
        driver.end(key, {"val_loss": 2.0 + n / 100, "epoch": 1, "time_total_s": 1.0})
    assert precisions == {"fp32", "bf16", "fp16"}


def test_dehb_minimises_so_a_max_objective_is_negated(tmp_path):
    from hpsearch.space import parse_space

    spec = parse_space({"name": "acc", "trainable": "digits",
                        "objective": {"metric": "acc", "mode": "max"},
                        "params": {"lr": {"type": "float", "low": 1e-4, "high": 1.0,
                                          "log": True}},
                        "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": 9,
                                      "grace_period": 1, "reduction_factor": 3}})
    _, driver = build("dehb", spec, seed=0, workers=1)
    key, _ = driver.start("t0")
    fidelity = driver.jobs[key]["fidelity"]
    assert not driver.report(key, {"acc": 0.5, "epoch": fidelity - 1, "time_total_s": 1.0})
    assert driver.report(key, {"acc": 0.75, "epoch": fidelity, "time_total_s": 2.0})
    driver.end(key, {"acc": 0.75, "epoch": fidelity, "time_total_s": 2.0})
    assert driver.optimizer.inc_score == -0.75
    assert driver.optimizer.history[0][3] == 2.0  # the cost told: the trial's own time


def test_a_missing_dehb_is_one_line(monkeypatch):
    import importlib.util

    from benchmarks.replay.dehb_method import unavailable

    assert unavailable("dehb") is None and unavailable("hpsearch") is None
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "dehb" else real(name, *a))
    assert unavailable("dehb").startswith("needs DEHB, which is not installed: pip install")
    monkeypatch.setitem(sys.modules, "dehb", None)  # import dehb now raises ImportError
    spec, _, _ = cli.load(*cli.WORKLOADS["digits"])
    with pytest.raises(ImportError, match=r"^dehb needs DEHB, .*--no-deps dehb"):
        build("dehb", spec, seed=0, workers=4)
