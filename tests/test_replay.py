"""The search-quality replay (``benchmarks/replay``, #25): hpsearch's own searcher and
ASHA, and Ray Tune's and Optuna's stock stacks, driven over recorded curves in simulated
time, without a Ray instance; the surrogate, the statistics and the command line.

These fail when the sweep's searcher or scheduler stops being drivable without Ray: the
replay builds them as ``hpsearch run`` does and calls only their public interfaces."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.replay import cli, compare  # noqa: E402
from benchmarks.replay.methods import METHODS, build  # noqa: E402
from benchmarks.replay.curves import surrogate_error  # noqa: E402
from benchmarks.replay.simulator import simulate  # noqa: E402
from hpsearch.store import status as st  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    return cli.load(*cli.WORKLOADS["digits"])  # spec, table, surrogate


def test_the_table_and_its_time_unit(digits):
    spec, table, _ = digits
    assert table.workload == "digits" and len(table.params) == 300
    assert set(table.names) == {"lr", "warmup_steps", "precision"}
    assert all(len(v) == spec.scheduler.max_t for v in table.values.values())
    fp32 = [ts[-1] for c, ts in table.times.items() if table.params[c]["precision"] == "fp32"]
    assert min(fp32) <= table.time_r <= max(fp32)
    assert table.best() <= table.target() <= sorted(table.final_means().values())[30]


def test_the_surrogate_answers_a_recorded_configuration_with_itself(digits):
    _, table, surrogate = digits
    for config in (0, 17, 299):
        params = table.params[config]
        assert surrogate.nearest(params) == config
        other = surrogate.nearest(params, exclude=config)
        assert other != config and table.params[other]["precision"] == params["precision"]
    err = surrogate_error(table, surrogate)
    # Good enough to keep the order a search relies on, far better than knowing nothing.
    assert err["n"] == 300 and err["rank_rho"] > 0.95 and err["mae"] < err["spread_sd"] / 5


def test_the_surrogate_learns_which_parameters_matter():
    """On charlm, weight decay and the fp16 loss scale barely move the loss: the learned
    distance leaves them out and errs less than one that counts every parameter alike."""
    from benchmarks.replay.curves import Surrogate
    from hpsearch.driver.search.space import distributions

    spec, table, learned = cli.load(*cli.WORKLOADS["charlm"])
    weights = dict(zip(learned.numeric, learned.weights))
    assert weights["lr"] > 0 and weights["weight_decay"] == weights["loss_scale_init"] == 0
    alike = Surrogate(table, distributions(spec), weights=(1.0,) * len(learned.numeric))
    err, err_alike = surrogate_error(table, learned), surrogate_error(table, alike)
    assert err["mae"] < err_alike["mae"] / 2 and err["rank_rho"] > 0.95


@pytest.mark.parametrize("method", ["hpsearch", "ray-stock"])
def test_a_replay_drives_the_searcher_and_asha_without_ray(digits, method):
    import ray

    spec, table, surrogate = digits
    row = simulate(method, table, surrogate, spec, seed=1, workers=4, budget=5.0)
    assert not ray.is_initialized()
    times = [t for t, _ in row["curve"]]
    values = [v for _, v in row["curve"]]
    assert times == sorted(times) and all(t <= 5.0 for t in times)
    assert values == sorted(values, reverse=True) and values[-1] >= table.best()
    assert row["stopped"] > row["trials"] / 2  # ASHA stopped most trials at their rungs
    assert sum(row["worker_time"].values()) == pytest.approx(4 * 5.0)  # 4 workers, never idle
    again = simulate(method, table, surrogate, spec, seed=1, workers=4, budget=5.0)
    assert again["curve"] == row["curve"] and again["trials"] == row["trials"]


def test_fifo_runs_every_trial_to_the_end(digits):
    spec, table, surrogate = digits
    row = simulate("random-fifo", table, surrogate, spec, seed=0, workers=2, budget=3.0)
    assert row["stopped"] == 0 and row["trials"] >= 4


def test_hpsearchs_study_and_records_say_how_each_replayed_trial_ended(digits):
    spec, table, surrogate = digits
    run_spec, driver = build("hpsearch", spec, seed=0, workers=2)
    ended = {}
    for n in range(12):  # two at a time, as the admission allows
        started = driver.start(f"t{n}")
        assert started is not None
        key, params = started
        values = table.values[(surrogate.nearest(params), 0)]
        for epoch, value in enumerate(values, 1):
            result = {"val_loss": value, "epoch": epoch, "training_iteration": epoch}
            stop = driver.report(key, result)
            if stop or epoch == len(values):
                driver.end(key, result)
                ended[key] = epoch
                break
    rows = driver.records.trials
    study = {t.user_attrs["trial_id"]: t for t in driver.study.get_trials()}
    assert set(study) == set(ended) == set(rows)
    for key, epoch in ended.items():
        status = rows[key]["status"]
        assert status == (st.COMPLETED if epoch == run_spec.scheduler.max_t else st.STOPPED_BY_ASHA)
        assert study[key].state.name == ("COMPLETE" if status == st.COMPLETED else "PRUNED")
        assert study[key].user_attrs["status"] == status
    assert any(e < run_spec.scheduler.max_t for e in ended.values())


def test_every_method_replays(digits):
    from benchmarks.replay.dehb_method import unavailable

    spec, table, surrogate = digits
    for method in METHODS:
        if unavailable(method):  # dehb: DEHB is optional (tests/test_replay_dehb.py)
            continue
        row = simulate(method, table, surrogate, spec, seed=0, workers=4, budget=1.0)
        assert row["curve"] and row["trials"] >= 4, method


def test_a_method_can_change_a_setting_of_the_space(digits):
    """``hpsearch@search.algorithm=random`` is random + ASHA, replay for replay; a setting
    the space has no field for is refused."""
    spec, table, surrogate = digits
    variant = simulate("hpsearch@search.algorithm=random", table, surrogate, spec, seed=3,
                       workers=4, budget=3.0)
    stock = simulate("random-asha", table, surrogate, spec, seed=3, workers=4, budget=3.0)
    default = simulate("hpsearch", table, surrogate, spec, seed=3, workers=4, budget=3.0)
    assert variant["curve"] == stock["curve"] and variant["curve"] != default["curve"]
    run_spec, _ = build("hpsearch@scheduler.reduction_factor=4@search.n_startup_trials=2",
                        spec, seed=0, workers=4)
    assert run_spec.scheduler.reduction_factor == 4 and run_spec.search.n_startup_trials == 2
    with pytest.raises(ValueError, match="search.FIELD=VALUE"):
        build("hpsearch@search.startup=2", spec, seed=0, workers=4)


def test_regret_bootstrap_and_verdict_on_hand_made_rows():
    row = {"curve": [[0.5, 2.0], [3.0, 1.0], [10.0, 0.5]], "best_in_table": 0.5, "budget": 20}
    assert compare.best_at(row, 0.1) is None and compare.best_at(row, 4) == 1.0
    assert compare.regret_at(row, 0.1, worst=3.0) == 2.5
    assert compare.regret_at(row, 20, worst=3.0) == 0.0
    assert compare.time_to(row, 1.0) == 3.0 and math.isinf(compare.time_to(row, 0.1))
    assert compare.bootstrap_mean([2.0] * 5) == (2.0, 2.0, 2.0)
    mean, low, high = compare.bootstrap_mean(list(range(30)))
    assert low < mean == 14.5 < high
    summary = {"hpsearch": {"regret": {5: (1, 0.9, 1.1), 10: (1, 0.9, 1.1)}},
               "ray-stock": {"regret": {5: (2, 1.5, 2.5), 10: (1, 0.95, 1.2)}},
               "random-asha": {"regret": {5: (0.5, 0.4, 0.6), 10: (1, 0.95, 1.2)}}}
    assert compare.verdict(summary) == ["hpsearch vs ray-stock: 5x ahead, 10x tied",
                                        "hpsearch vs random-asha: 5x behind, 10x tied"]


def test_the_command_line_writes_one_line_per_method_and_seed_and_resumes(tmp_path, capsys):
    from benchmarks import search_quality

    out = tmp_path / "sq.jsonl"
    argv = ["--simulate", "--seeds", "2", "--methods", "hpsearch,ray-stock", "--budget", "5",
            "--out", str(out)]
    assert cli.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["method"], r["seed"]) for r in rows) == [
        ("hpsearch", 0), ("hpsearch", 1), ("ray-stock", 0), ("ray-stock", 1)]
    assert all(isinstance(r["curve"], list) and len(r["curve"][0]) == 2 for r in rows)
    assert cli.main(argv) == 0 and len(out.read_text().splitlines()) == 4  # nothing again
    capsys.readouterr()
    sys_argv, sys.argv = sys.argv, ["search_quality.py", "--table", str(out)]
    try:
        search_quality.main()
    finally:
        sys.argv = sys_argv
    printed = capsys.readouterr().out
    assert "| hpsearch: hpsearch default" in printed and "regret at 5x" in printed
    assert "hpsearch vs ray-stock: 5x " in printed and "surrogate (nearest neighbour; distance weights lr" in printed
    with pytest.raises(SystemExit):
        cli.main(["--simulate", "--methods", "hpsearch,nope", "--out", str(out)])


def test_a_real_sweeps_tables_become_a_row_of_the_simulators_format(tmp_path, digits):
    """Three trials of a real sweep's tables, against a two-configuration curve table made
    by hand; every figure of the row is worked out in the comments."""
    from optuna.distributions import FloatDistribution

    from benchmarks.replay.confirm import row_from_sweep
    from benchmarks.replay.curves import CurveTable, Surrogate
    from hpsearch.store.layout import SweepDir
    from hpsearch.store.records import TrialRecords
    from hpsearch.store.tables import write_tables

    spec, _, _ = digits
    table = CurveTable(
        path=tmp_path / "hand.parquet", workload="digits", names=("lr",),
        params={0: {"lr": 0.01}, 1: {"lr": 0.1}},
        values={(0, 0): [1.0, 0.8, 0.7], (0, 1): [0.8, 0.6, 0.5],   # mean 0.9, 0.7, 0.6
                (1, 0): [0.6, 0.5, 0.4], (1, 1): [0.4, 0.3, 0.2]},  # mean 0.5, 0.4, 0.3
        times={0: [0.5, 1.0, 1.5], 1: [0.4, 0.8, 1.2]}, seeds={0: [0, 1], 1: [0, 1]},
        time_r=2.0)
    surrogate = Surrogate(table, {"lr": FloatDistribution(1e-3, 1.0, log=True)},
                          weights=(1.0,))
    # time(R) lasts 2 s; the budget is 2 time(R) from the first start, 2 workers.
    # trial (lr: its configuration), start in s, reports (seconds since its start, value)
    trials = {"a": (0.01, 0.0, [(1.0, 0.9), (3.0, 0.85), (5.0, 0.5)], False),
              "b": (0.1, 1.0, [(1.0, 0.8), (2.4, 0.6)], True),      # stopped by ASHA
              "c": (0.01, 4.4, [(1.0, 0.1)], False)}                # starts past the budget
    records, t0 = TrialRecords(spec), 1_800_000_000.0
    for key, (lr, begin, reports, stopped) in trials.items():
        records.start(key, {"lr": lr, "precision": "fp32"})
        records.trials[key]["started_at"] = t0 + begin
        for epoch, (elapsed, value) in enumerate(reports, 1):
            records.result(key, {"val_loss": value, "epoch": epoch, "training_iteration": epoch,
                                 "time_total_s": elapsed, "step": 22 * epoch})
        if stopped:
            records.stopped_by_scheduler(key)
        records.end(key, returned=True)
    sweep = SweepDir(tmp_path / "replay-hpsearch-0")
    sweep.path.mkdir()
    write_tables(records, sweep)
    row = row_from_sweep(sweep.path, method="hpsearch", seed=0, metric="val_loss", table=table,
                         surrogate=surrogate, seconds_per_r=2.0, budget=2.0, workers=2)
    # Reports in time(R) from the first start: a at 0.5 (0.9), 1.5 (0.85), 2.5 (past the
    # budget); b starts at 0.5: 1.0 (0.8), 1.7 (0.6); c starts at 2.2: not counted.
    # The best so far: 0.9 at 0.5, 0.8 at 1.0, 0.6 at 1.7 (0.85 at 1.5 is no better) ...
    assert row["curve"] == [[0.5, 0.9], [1.0, 0.8], [1.7, 0.6]]
    # ... each worth its configuration's mean at that epoch: 0.9 (a, 1), 0.5 and 0.4 (b).
    assert [at for at, _ in row["found"]] == [0.5, 1.0, 1.7]
    assert [mean for _, mean in row["found"]] == pytest.approx([0.9, 0.5, 0.4])
    assert row["trials"] == 2 and row["stopped"] == 1
    # Trained within the budget: a to epoch 2 (1.0 s of 2.0), b to epoch 2 (0.8 s of 2.0),
    # 0.5 + 0.4 = 0.9 time(R); the overhead per trial: (2 workers x 2.0 - 0.9) / 2 trials.
    assert row["overhead"] == pytest.approx(1.55)
    # Busy: a from 0 to the budget (2.0), b from 0.5 to its last report at 1.7 (1.2).
    assert row["worker_time"] == pytest.approx({"fp32": 3.2})
    assert row["best_in_table"] == 0.2 and row["best_mean_in_table"] == pytest.approx(0.3)
    assert (row["method"], row["seed"], row["real"], row["workers"], row["budget"],
            row["time_r_s"]) == ("hpsearch@ray", 0, True, 2, 2.0, 2.0)


def test_mo_asha_replays_with_the_sweeps_own_objects_and_its_front_is_scored(digits):
    from benchmarks.replay import front

    assert front.hypervolume([(1.0, 0.5), (0.5, 1.0)]) == pytest.approx(0.75)
    assert front.hypervolume([(1.0, 0.5), (0.4, 0.4)]) == pytest.approx(0.5)  # dominated
    spec, table, _ = digits
    objectives = (spec.objective, front.SECOND)
    everything = front.coverage(table, list(table.params), objectives)
    assert everything["hv"] == pytest.approx(1.0) and everything["exact"] == 1.0
    rows = {r["method"]: r for r in front.run(1, [12])}
    asha, fifo = rows["mo-asha"], rows["mo-fifo"]
    assert 0 < asha["hv"] <= 1 and 0 < fifo["hv"] <= 1
    assert asha["worker_time"] < fifo["worker_time"]  # MO-ASHA stopped dominated trials
