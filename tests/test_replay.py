"""The search-quality replay (``benchmarks/replay``, #25): hpsearch's own searcher and
ASHA, and Ray Tune's, Optuna's and Syne Tune's stock stacks, driven over recorded curves in
simulated time, without a Ray instance; the surrogate, the statistics and the command line.

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


def test_pasha_replays_with_the_sweeps_own_scheduler_and_record(digits):
    """``scheduler.progressive: true``: the first trials that run past rung 1 end at the
    second rung (3 of max_t 6), recorded as stopped by ASHA; the end grows to max_t once
    the two top rungs rank trials differently, and no trial runs past the end it had."""
    from hpsearch.driver.search.pasha import ProgressiveRungs

    spec, table, surrogate = digits
    method = "hpsearch@scheduler.progressive=true"
    run_spec, driver = build(method, spec, seed=0, workers=4)
    assert isinstance(driver.scheduler.rungs, ProgressiveRungs)
    assert run_spec.scheduler.brackets == 1  # as a space file asking for PASHA gets
    ends = []  # the end when each trial ended, and the epochs it ran
    end = driver.end

    def watched(key, result):
        ends.append((driver.scheduler.rungs.end, result["epoch"]))
        end(key, result)

    driver.end = watched
    row = simulate(method, table, surrogate, run_spec, seed=0, workers=4, budget=4.0,
                   driver=driver)
    # the configuration found, trained in full, is at least as good as where it was found
    assert [t for t, _ in row["found_full"]] == [t for t, _ in row["found"]]
    assert all(f <= g for (_, f), (_, g) in zip(row["found_full"], row["found"]))
    assert ends[0][0] == 3 and driver.scheduler.rungs.end == run_spec.scheduler.max_t == 6
    assert all(epochs <= 6 for _, epochs in ends)
    opened = next(i for i, (e, _) in enumerate(ends) if e == 6)
    assert all(epochs <= 3 for _, epochs in ends[:opened - 4])  # 4 ran when it opened
    rows = driver.records.trials
    assert any(r["status"] == st.STOPPED_BY_ASHA and r["epochs"] == 3 for r in rows.values())


def test_the_sweeps_own_stopper_ends_hpsearchs_replay_at_its_budget(digits):
    """As Tune asks the sweep's stopper at each step, the replay asks it before each
    evaluation: its time budget, on the replay's clock, ends the replay."""
    from hpsearch.driver.monitor.stops import TIME_BUDGET

    spec, table, surrogate = digits
    run_spec, driver = build("hpsearch", spec, seed=2, workers=4)
    row = simulate("hpsearch", table, surrogate, run_spec, seed=2, workers=4, budget=2.0,
                   driver=driver)
    assert driver.stopper.reason == TIME_BUDGET
    assert 1.9 < row["clock"] <= 2.0 and driver.now > 2.0  # the first evaluation past it


def test_every_method_replays(digits):
    from benchmarks.replay.methods import unavailable

    spec, table, surrogate = digits
    for method in METHODS:
        if unavailable(method):  # syne-*, dehb: optional (the tests below, test_replay_dehb)
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
    # Trained in full, each is worth its configuration's best mean: 0.6 (a), 0.3 (b).
    assert [mean for _, mean in row["found_full"]] == pytest.approx([0.6, 0.3, 0.3])
    assert row["trials"] == 2 and row["stopped"] == 1
    # Trained within the budget: a to epoch 2 (1.0 s of 2.0), b to epoch 2 (0.8 s of 2.0),
    # 0.5 + 0.4 = 0.9 time(R); the overhead per trial: (2 workers x 2.0 - 0.9) / 2 trials.
    assert row["overhead"] == pytest.approx(1.55)
    # Busy: a from 0 to the budget (2.0), b from 0.5 to its last report at 1.7 (1.2).
    assert row["worker_time"] == pytest.approx({"fp32": 3.2})
    assert row["best_in_table"] == 0.2 and row["best_mean_in_table"] == pytest.approx(0.3)
    assert (row["method"], row["seed"], row["real"], row["workers"], row["budget"],
            row["time_r_s"]) == ("hpsearch@ray", 0, True, 2, 2.0, 2.0)


def test_a_real_replay_of_a_method_with_settings_is_a_valid_space_of_its_own(tmp_path):
    """``--confirm`` takes a method with settings (PASHA here): its space file passes
    validation with the settings in it, under a name a sweep may have."""
    from benchmarks.replay.confirm import space_text, sweep_name
    from hpsearch.space import load_space

    spec, _, _ = cli.load(*cli.WORKLOADS["running-sum"])
    method = "hpsearch@scheduler.progressive=true"
    path = tmp_path / f"{sweep_name(method, 3)}.yaml"
    path.write_text(space_text(method, 3, space=cli.WORKLOADS["running-sum"][0], spec=spec,
                               book=tmp_path / "book.pkl", seconds_per_r=3, workers=4))
    run = load_space(path)
    assert run.name == "replay-hpsearch-scheduler.progressive-true-3"
    assert run.scheduler.progressive and run.scheduler.brackets == 1 and run.search.seed == 3
    assert "--sweep-seed" in run.command.argv


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


def _tiny(tmp_path):
    """A space of one parameter and a table of 12 configurations made by hand: the closer
    ``lr`` is to 0.01, the lower every epoch's value, so a rung's ranking is the final one.
    Rungs at epochs 1 and 3 of 9 (``reduction_factor: 3``); time(R) is 9 s, an epoch 1 s."""
    from benchmarks.replay.curves import CurveTable, Surrogate
    from hpsearch.driver.search.space import distributions
    from hpsearch.space import parse_space

    spec = parse_space({"name": "tiny", "trainable": "digits",
                        "objective": {"metric": "val_loss", "mode": "min"},
                        "params": {"lr": {"type": "float", "low": 1e-4, "high": 1.0,
                                          "log": True}},
                        "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": 9,
                                      "grace_period": 1, "reduction_factor": 3}})
    lrs = {c: 10 ** (-4 + 4 * c / 11) for c in range(12)}
    table = CurveTable(
        path=tmp_path / "tiny.parquet", workload="tiny", names=("lr",),
        params={c: {"lr": lr} for c, lr in lrs.items()},
        values={(c, 0): [1 + (math.log10(lr) + 2) ** 2 + 1 / e for e in range(1, 10)]
                for c, lr in lrs.items()},
        times={c: [float(e) for e in range(1, 10)] for c in lrs}, seeds={c: [0] for c in lrs},
        time_r=9.0)
    return spec, table, Surrogate(table, distributions(spec), weights=(1.0,))


@pytest.mark.parametrize("method", ["syne-asha", "syne-bohb"])
def test_syne_tunes_schedulers_stop_trials_at_hpsearchs_rungs(tmp_path, method):
    """Syne Tune's ASHA and BOHB, driven as its Tuner drives them: a trial it stops ends
    there, at a rung of the space's scheduler, and the replay is repeatable by its seed."""
    pytest.importorskip("syne_tune")
    import ray

    from benchmarks.replay.peers import SyneTuneDriver

    spec, table, surrogate = _tiny(tmp_path)
    run_spec, driver = build(method, spec, seed=3, workers=4)
    assert isinstance(driver, SyneTuneDriver)
    row = simulate(method, table, surrogate, run_spec, seed=3, workers=4, budget=3.0,
                   driver=driver)
    assert not ray.is_initialized()
    stopped_at = [epochs for _, epochs, completed in row["ended"] if not completed]
    assert row["stopped"] == len(stopped_at) > row["trials"] / 3
    assert set(stopped_at) <= {1, 3}  # hpsearch's rungs, not anywhere
    completed = sum(c for _, _, c in row["ended"])
    # Its ASHA says STOP at max_t too: every decision it made is a trial the replay ended.
    assert driver.scheduler.num_stopped == row["stopped"] + completed
    assert sum(row["worker_time"].values()) == pytest.approx(4 * 3.0)
    again = simulate(method, table, surrogate, spec, seed=3, workers=4, budget=3.0)
    assert again["curve"] == row["curve"] and again["ended"] == row["ended"]


def test_syne_tunes_median_stopping_rule_stops_trials_below_the_median(tmp_path):
    pytest.importorskip("syne_tune")
    spec, table, surrogate = _tiny(tmp_path)
    row = simulate("syne-median", table, surrogate, spec, seed=3, workers=4, budget=3.0)
    stopped = [config for config, _, completed in row["ended"] if not completed]
    assert row["stopped"] == len(stopped) > row["trials"] / 4
    # On this table a configuration's rank is the same at every epoch: the trials it let
    # run to the end are better, in the mean, than those it stopped.
    final = {c: table.values[(c, 0)][-1] for c in table.params}
    kept = [final[c] for c, _, completed in row["ended"] if completed]
    assert kept and sum(kept) / len(kept) < sum(final[c] for c in stopped) / len(stopped)


def test_syne_tunes_config_space_is_the_space_files(digits):
    pytest.importorskip("syne_tune")
    import syne_tune.config_space as cs

    from benchmarks.replay.peers import config_space

    spec, _, _ = cli.load(*cli.WORKLOADS["charlm"])
    space = config_space(spec)
    assert list(space) == [p.name for p in spec.params]
    assert isinstance(space["lr"], cs.Float) and cs.is_log_space(space["lr"])
    assert (space["lr"].lower, space["lr"].upper) == (3e-4, 1e-2)
    assert space["warmup_steps"].values == [0, 16, 32, 48, 64]  # step 16
    assert space["precision"].categories == ["fp32", "bf16", "fp16"]
    assert not cs.is_log_space(space["weight_decay"])
    _, driver = build("syne-bohb", spec, seed=0, workers=4)
    for n in range(8):
        _, params = driver.start(f"t{n}")
        assert 3e-4 <= params["lr"] <= 1e-2 and params["warmup_steps"] in (0, 16, 32, 48, 64)


def test_without_syne_tune_its_methods_say_so_in_one_line_and_all_means_the_others(
        tmp_path, capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "syne_tune" else find_spec(name, *a))
    out = tmp_path / "sq.jsonl"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--simulate", "--seeds", "1", "--methods", "hpsearch,syne-asha,syne-bohb",
                  "--budget", "1", "--out", str(out)])
    assert exit_.value.code == 2 and not out.exists()
    assert capsys.readouterr().err == ("syne-asha, syne-bohb: needs Syne Tune, which is not "
                                       "installed: pip install syne-tune\n")
    with pytest.raises(ImportError, match="syne-asha needs Syne Tune.*pip install syne-tune"):
        build("syne-asha", cli.load(*cli.WORKLOADS["digits"])[0], seed=0, workers=4)
    ran = []
    monkeypatch.setattr(cli, "run", lambda methods, *a, **k: ran.extend(methods) or [])
    assert cli.main(["--simulate", "--methods", "all", "--out", str(out)]) == 0
    assert ("skipped syne-asha, syne-bohb, syne-median: needs Syne Tune"
            in capsys.readouterr().out)
    from benchmarks.replay import dehb_method  # dehb: skipped too where DEHB is missing

    assert ran == [m for m in METHODS
                   if not m.startswith("syne-") and not dehb_method.unavailable(m)]
