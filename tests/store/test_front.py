"""The trial table of a sweep of several objectives with a constraint (#24): one column
per objective, ``feasible``, and ``pareto`` for the non-dominated feasible trials that
reached ``max_t``, kept up to date as trials end and after a resume. No Ray."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from hpsearch.space.spec import Constraint, FloatParam, Objective, Scheduler, Spec, Trials
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import read_trials, write_tables

LOSS, SPEED = Objective("val_loss", "min"), Objective("samples_per_s", "max")


def make_spec(**changes):
    spec = Spec(name="mo", trainable="digits", objective=LOSS,
                params=(FloatParam("lr", 1e-4, 1e-1, log=True),), fixed={},
                scheduler=Scheduler(max_t=3, grace_period=1, reduction_factor=3),
                trials=Trials(num=10), more_objectives=(SPEED,),
                constraints=(Constraint("val_accuracy", min=0.5),))
    return replace(spec, **changes)


def run(records, tid, loss, speed, acc, *, epochs=3):
    records.start(tid, {"lr": 0.01})
    for e in range(1, epochs + 1):
        records.result(tid, {"val_loss": loss, "samples_per_s": speed, "val_accuracy": acc,
                             "epoch": e, "training_iteration": e, "time_total_s": float(e)})
    if epochs < 3:
        records.stopped_by_scheduler(tid)
    records.end(tid, returned=True)


def finished(sweep):
    """A manifest that says ``sweep`` finished, as the driver writes it."""
    from hpsearch.store.manifest import new_manifest, write_manifest

    manifest = new_manifest(name=sweep.name, argv=["hpsearch", "run", "s.yaml"], seed=0,
                            cluster={"CPU": 2.0}, address=None,
                            objective={"metric": "val_loss", "mode": "min"})
    manifest["status"] = "finished"
    write_manifest(sweep, manifest)


def two_trial_front(path):
    """A sweep directory at ``path`` whose tables hold two trials, ``a`` and ``b``, both
    on the front (``a`` faster, ``b`` lower in loss)."""
    records = TrialRecords(make_spec())
    run(records, "a", 0.5, 100, 0.9)
    run(records, "b", 0.4, 50, 0.9)
    sweep = SweepDir(path)
    sweep.path.mkdir()
    write_tables(records, sweep)
    return sweep


def front(records):
    return sorted(t for t, row in records.trials.items() if row.get("pareto"))


def test_the_front_is_the_feasible_non_dominated_trials_that_reached_max_t(tmp_path):
    records = TrialRecords(make_spec())
    run(records, "a", 0.5, 100, 0.9)
    run(records, "b", 0.4, 50, 0.9)
    run(records, "c", 0.6, 90, 0.9)          # dominated by a
    run(records, "d", 0.1, 1000, 0.2)        # the best point, but infeasible
    run(records, "e", 0.05, 2000, 0.9, epochs=1)  # stopped at its rung: not at max_t
    assert front(records) == ["a", "b"]
    assert [records.trials[t]["feasible"] for t in "abcde"] == [True, True, True, False, True]
    before = records.version
    run(records, "f", 0.3, 200, 0.9)         # dominates a and b: they leave the front
    assert front(records) == ["f"]
    assert {"a", "b", "f"} <= set(records.changed_since(before))  # the writer rewrites them
    sweep = SweepDir(tmp_path / "mo")
    sweep.path.mkdir()
    write_tables(records, sweep)
    table = read_trials(sweep.path).set_index("trial_id")
    cols = list(table.columns)
    assert cols[cols.index("final_value"):cols.index("final_value") + 5] == [
        "final_value", "val_loss", "samples_per_s", "feasible", "pareto"]
    assert str(table["pareto"].dtype) == "boolean" and str(table["val_loss"].dtype) == "float64"
    assert table["pareto"].to_dict() == {"a": False, "b": False, "c": False, "d": False,
                                         "e": False, "f": True}
    assert table.loc["d", "samples_per_s"] == 1000 and not table.loc["d", "feasible"]


def test_a_resumed_sweeps_front_continues_from_its_table(tmp_path):
    sweep = two_trial_front(tmp_path / "mo")
    resumed = TrialRecords(make_spec())
    rows = read_trials(sweep.path).astype(object).where(lambda df: pd.notna(df), None)
    resumed.load(rows.to_dict("records"), [])
    assert front(resumed) == ["a", "b"]  # as the table says
    before = resumed.version
    run(resumed, "c", 0.45, 75, 0.9)  # between a and b: all three on the front
    assert front(resumed) == ["a", "b", "c"]
    assert [resumed.trials[t]["pareto"] for t in "abc"] == [True, True, True]
    run(resumed, "d", 0.35, 120, 0.9)  # dominates all three
    assert front(resumed) == ["d"]
    assert [resumed.trials[t]["pareto"] for t in "abc"] == [False, False, False]
    assert {"a", "b", "c", "d"} <= set(resumed.changed_since(before))  # rewritten
    write_tables(resumed, sweep)
    assert read_trials(sweep.path).set_index("trial_id")["pareto"].to_dict() == {
        "a": False, "b": False, "c": False, "d": True}


def test_one_objective_without_constraints_keeps_todays_columns(tmp_path):
    records = TrialRecords(make_spec(more_objectives=(), constraints=()))
    run(records, "a", 0.5, 100, 0.9)
    sweep = SweepDir(tmp_path / "so")
    sweep.path.mkdir()
    write_tables(records, sweep)
    cols = list(read_trials(sweep.path).columns)
    assert not {"val_loss", "samples_per_s", "feasible", "pareto"} & set(cols)
    assert cols[:4] == ["trial_id", "status", "lr", "final_value"]


def test_ls_gives_the_fronts_size_next_to_the_first_objectives_best(tmp_path):
    import yaml
    from click.testing import CliRunner

    from hpsearch.cli import main
    from hpsearch.store.listing import list_sweeps

    records = TrialRecords(make_spec())
    run(records, "a", 0.5, 100, 0.9)
    run(records, "b", 0.4, 50, 0.9)
    run(records, "c", 0.6, 90, 0.9)
    sweep = SweepDir(tmp_path / "mo")
    sweep.path.mkdir()
    sweep.space.write_text(yaml.safe_dump({"name": "mo", "trials": {"num": 10}}))
    write_tables(records, sweep)
    finished(sweep)
    (row,) = list_sweeps(tmp_path)
    assert row["front"] == 2 and row["best_value"] == 0.4
    out = CliRunner().invoke(main, ["ls", "--storage", str(tmp_path)])
    assert out.exit_code == 0 and "front of 2, val_loss 0.4" in out.output


def test_a_warm_start_imports_every_objective_and_the_constraints_and_reruns_the_front(tmp_path):
    import optuna

    from hpsearch.driver.record.objectives import directions
    from hpsearch.driver.search.warmstart import import_trials

    records = TrialRecords(make_spec())
    run(records, "a", 0.5, 100, 0.9)
    run(records, "b", 0.4, 50, 0.9)
    run(records, "c", 0.6, 90, 0.9)               # dominated by a
    run(records, "d", 0.1, 1000, 0.2)             # infeasible
    run(records, "e", 0.9, 80, 0.9, epochs=1)     # stopped at its rung
    for tid, lr in zip("abcde", (0.01, 0.02, 0.03, 0.04, 0.05)):
        records.trials[tid]["lr"] = lr
    source = SweepDir(tmp_path / "night-1")
    source.path.mkdir()
    write_tables(records, source)
    spec = make_spec()
    study = optuna.create_study(directions=directions(spec.objectives))
    summary = import_trials(spec, study, [source])
    assert summary["imported"] == 5
    by = {t.user_attrs["warm_start"].split("/")[1]: t for t in study.trials
          if "warm_start" in t.user_attrs}
    assert by["a"].values == [0.5, 100] and by["d"].values == [0.1, 1000]
    assert by["d"].system_attrs["constraints"][0] > 0 >= by["a"].system_attrs["constraints"][0]
    assert by["e"].state == optuna.trial.TrialState.PRUNED
    assert by["e"].user_attrs["report:1"] == [0.9, 80]
    assert [p["lr"] for p in summary["enqueued"]] == [0.02, 0.01]  # the front, b then a
    assert {t.user_attrs["warm_start"].split("/")[1] for t in study.best_trials} == {"a", "b"}


def test_a_warm_started_sweep_of_several_objectives_opens_its_study_with_each_direction(
        tmp_path):
    """The whole warm start, as ``hpsearch run --warm-start`` begins a sweep: its study is
    the record's, made with one direction per objective (made with the first objective's
    alone, adding the earlier trials failed with a ValueError), and the record takes the
    sweep's own seed and the import's summary for its manifest."""
    import io

    import optuna

    from hpsearch.driver.record.objectives import directions
    from hpsearch.driver.record.sweep_record import SweepRecord
    from hpsearch.driver.search.warmstart import warm_start

    finished(two_trial_front(tmp_path / "night-1"))
    spec = make_spec()
    spec = replace(spec, search=replace(spec.search, warm_start=("night-1",), seed=0))
    sweep = SweepDir(tmp_path / "night-2")
    record = SweepRecord.create(spec, sweep, cluster={"CPU": 2.0}, address=None, plan={},
                                replace=False)
    warm_start(record, io.StringIO())
    warmed, sampler = record.study, optuna.samplers.RandomSampler(seed=1)
    study = record.open_study(directions=directions(spec.objectives), sampler=sampler)
    assert study is warmed and study.sampler is sampler  # as the run does: not read again
    assert len(study.directions) == 2
    assert sorted(t.values for t in study.trials if t.values) == [[0.4, 50.0], [0.5, 100.0]]
    assert record.manifest["warm_start"]["imported"] == 2
    assert record.spec.search.seed == record.manifest["seed"] != 0


def test_an_infeasible_trial_is_never_the_best(tmp_path):
    import yaml

    from hpsearch.report import write_report
    from hpsearch.store.listing import list_sweeps

    spec = make_spec(more_objectives=())  # one objective and the constraint
    records = TrialRecords(spec)
    run(records, "a", 0.5, 100, 0.9)
    run(records, "d", 0.1, 1000, 0.2)  # the lowest loss, but infeasible
    assert records.best()["trial_id"] == "a"
    sweep = SweepDir(tmp_path / "so")
    sweep.path.mkdir()
    sweep.space.write_text(yaml.safe_dump({
        "name": "so", "trainable": "digits", "objective": {"metric": "val_loss", "mode": "min"},
        "constraints": [{"metric": "val_accuracy", "min": 0.5}],
        "params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        "scheduler": {"max_t": 3, "grace_period": 1, "reduction_factor": 3}}))
    write_tables(records, sweep)
    finished(sweep)
    (row,) = list_sweeps(tmp_path)
    assert row["best_trial"] == "a" and row["best_value"] == 0.5 and row["front"] is None
    md = write_report(sweep.path).md.read_text()
    assert "val\\_loss 0.5 (min) from trial a" in md
    assert "Trials that broke a constraint (feasible false) are left out." in md
