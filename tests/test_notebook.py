"""notebooks/analyze_sweep.ipynb runs top to bottom on a sweep directory, plots included
(matplotlib is a dependency), and finds what is in it: a synthetic sweep written with the
same TrialRecords / write_tables the driver uses, with trials completed, stopped by ASHA,
diverged, failed and still running. No Ray."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
import yaml

from hpsearch.store.layout import SweepDir
from hpsearch.store.manifest import new_manifest, write_manifest
from hpsearch.space import load_space
from hpsearch.store.records import TrialRecords
from hpsearch.store.tables import write_tables

ROOT = Path(__file__).parents[1]
NOTEBOOK = ROOT / "notebooks" / "analyze_sweep.ipynb"
STEPS_PER_EPOCH = 22  # digits at batch 64, as in search_spaces/quickstart.yaml

# trial id -> (params, val_loss per epoch, how it ends). quickstart: ASHA, max_t 6, rungs 1, 3.
TRIALS = {
    "a1b2c3d4": ({"lr": 0.01, "warmup_steps": 10, "precision": "fp32"},
                 [0.9, 0.5, 0.3, 0.2, 0.12, 0.10], "end"),
    "b2c3d4e5": ({"lr": 0.003, "warmup_steps": 20, "precision": "bf16"},
                 [1.1, 0.7, 0.4, 0.25, 0.18, 0.15], "end"),
    "c3d4e5f6": ({"lr": 0.0002, "warmup_steps": 0, "precision": "fp32"}, [2.0], "end"),
    "d4e5f6a7": ({"lr": 0.02, "warmup_steps": 40, "precision": "bf16"}, [1.0, 0.7, 0.5], "end"),
    "e5f6a7b8": ({"lr": 0.03, "warmup_steps": 0, "precision": "fp32"}, [1.0, "diverged"], "end"),
    "f6a7b8c9": ({"lr": 0.001, "warmup_steps": 30, "precision": "bf16"}, [], "error"),
    "a7b8c9d0": ({"lr": 0.005, "warmup_steps": 10, "precision": "fp32"}, [0.9, 0.6], "running"),
    "b8c9d0e1": ({"lr": 0.0001, "warmup_steps": 20, "precision": "bf16"}, [1.8], "end"),
}


def report(trial_id, params, epoch, val_loss, *, last):
    """A result as Tune hands it to the tables callback: harness metrics plus Tune's keys."""
    if val_loss == "diverged":  # the harness's last report; sanitize_report made val_loss inf
        step = 40
        metrics = {
            "step": step, "epoch": step / STEPS_PER_EPOCH, "lr": params["lr"],
            "train_loss": math.nan, "val_loss": math.inf, "grad_norm": math.nan,
            "samples_per_s": 0.0, "peak_mem_mb": None, "precision": params["precision"],
            "skipped_steps": 0, "status": "diverged",
            "reason": f"training loss became non-finite (nan) by step {step}",
        }
    else:
        metrics = {
            "step": epoch * STEPS_PER_EPOCH, "epoch": epoch, "lr": params["lr"] * 0.9,
            "train_loss": val_loss * 0.95, "val_loss": val_loss, "val_accuracy": 1 - val_loss / 3,
            "grad_norm": 0.8,
            "samples_per_s": 5200.0 if params["precision"] == "fp32" else 4100.0,
            "peak_mem_mb": None, "precision": params["precision"], "skipped_steps": 0,
            "status": "completed" if last and epoch == 6 else "running",
        }
    tune_keys = {
        "training_iteration": epoch, "time_total_s": 1.5 * epoch, "time_this_iter_s": 1.5,
        "trial_id": trial_id, "config": dict(params), "date": "2025-01-31_01-00-00",
        "timestamp": 1738285200 + epoch, "pid": 4242, "hostname": "gpu-1",
        "node_ip": "192.0.2.11", "done": False, "iterations_since_restore": epoch,
    }
    return {**metrics, **tune_keys}


def write_sweep(tmp_path, raw: dict) -> Path:
    """A sweep of the space ``raw`` whose tables hold :data:`TRIALS`."""
    from hpsearch.space import parse_space

    spec = parse_space(raw)
    sweep = tmp_path / "runs" / spec.name
    sweep.mkdir(parents=True)
    (sweep / "space.yaml").write_text(yaml.safe_dump(dict(raw), sort_keys=False))
    manifest = new_manifest(
        name=spec.name, argv=["hpsearch", "run", "search_spaces/quickstart.yaml"],
        seed=spec.search.seed, cluster={"CPU": 2.0}, address=None,
        objective={"metric": spec.objective.metric, "mode": spec.objective.mode},
    )
    manifest["plan"] = {"slots": 2, "rungs": list(spec.scheduler.rungs())}
    write_manifest(SweepDir(sweep), manifest)

    records = TrialRecords(spec)
    for trial_id, (params, losses, ending) in TRIALS.items():
        records.start(trial_id, params)
        for epoch, loss in enumerate(losses, start=1):
            records.result(trial_id, report(trial_id, params, epoch, loss,
                                            last=epoch == len(losses)))
        if ending == "end":
            records.end(trial_id)
        elif ending == "error":
            records.end(trial_id, errored=True, error="RuntimeError: CUDA error: out of memory")
    write_tables(records, SweepDir(sweep))
    return sweep


@pytest.fixture
def sweep_dir(tmp_path):
    return write_sweep(tmp_path, dict(load_space(ROOT / "search_spaces" / "quickstart.yaml").raw))


def run_notebook(sweep, monkeypatch) -> dict:
    """Execute every code cell in order in one namespace, as a kernel would, drawing with
    matplotlib's Agg backend (no display)."""
    import matplotlib

    monkeypatch.setenv("HPSEARCH_SWEEP", str(sweep))
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    namespace: dict = {"__name__": "__main__"}
    figures = []
    monkeypatch.setattr(plt, "show", lambda *a, **k: figures.extend(
        plt.figure(n) for n in plt.get_fignums()) or plt.close("all"))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*non-interactive.*")  # Agg's plt.show()
        for i, cell in enumerate(code_cells()):
            exec(compile(cell, f"{NOTEBOOK.name}[{i}]", "exec"), namespace)
    plt.close("all")
    namespace["_figures"] = figures
    return namespace


def code_cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_notebook_is_nbformat_4_with_empty_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5
    assert nb["metadata"]["kernelspec"]["language"] == "python"
    ids = [c["id"] for c in nb["cells"]]
    assert len(set(ids)) == len(ids)
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("code", "markdown")
        assert isinstance(cell["source"], list) and all(isinstance(s, str) for s in cell["source"])
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
    for i, source in enumerate(code_cells()):
        compile(source, f"cell {i}", "exec")


def test_first_cell_sets_sweep_from_the_environment_or_quickstart(monkeypatch):
    first = json.loads(NOTEBOOK.read_text())["cells"][0]
    assert first["cell_type"] == "code"
    monkeypatch.delenv("HPSEARCH_SWEEP", raising=False)
    namespace: dict = {}
    exec("".join(first["source"]), namespace)
    assert namespace["SWEEP"] == "runs/quickstart"
    monkeypatch.setenv("HPSEARCH_SWEEP", "runs/nightly-2025-01-31")
    exec("".join(first["source"]), namespace)
    assert namespace["SWEEP"] == "runs/nightly-2025-01-31"


def test_notebook_reads_through_the_public_api():
    source = "\n".join(code_cells())
    assert "hpsearch.read_trials(" in source and "hpsearch.read_history(" in source
    assert "read_parquet" not in source


def test_notebook_runs_on_a_sweep_and_finds_its_trials(sweep_dir, monkeypatch, capsys):
    ns = run_notebook(sweep_dir, monkeypatch)
    assert ns["front"] is None  # one objective: no front section

    assert len(ns["trials"]) == len(TRIALS)
    assert ns["PARAMS"] == ["lr", "warmup_steps", "precision"]
    assert (ns["METRIC"], ns["MODE"], ns["UNIT"], ns["RUNGS"]) == ("val_loss", "min", "epochs",
                                                                   [1, 3])
    assert ns["status_counts"].to_dict() == {
        "stopped_by_asha": 3, "completed": 2, "diverged": 1, "failed": 1, "running": 1,
    }

    best = ns["best"]
    assert list(best["trial_id"]) == ["a1b2c3d4", "b2c3d4e5", "d4e5f6a7", "a7b8c9d0", "e5f6a7b8"]
    assert best["best_value"].is_monotonic_increasing
    assert best.loc[0, "best_value"] == 0.10 and best.loc[0, "lr"] == 0.01
    assert best.loc[4, "status"] == "diverged" and best.loc[4, "final_value"] == math.inf

    curves = ns["curves"]  # finite reports only: the failed trial has none
    assert sorted(curves.columns) == sorted(set(TRIALS) - {"f6a7b8c9"})
    assert list(curves.index) == [1, 2, 3, 4, 5, 6]
    assert math.isnan(curves.loc[2, "e5f6a7b8"])  # its diverged report is left out

    lr_effect = ns["lr_effect"]
    assert len(lr_effect) == 7 and lr_effect["lr"].is_monotonic_increasing

    by_precision = ns["by_precision"]
    assert by_precision["trials"].to_dict() == {"bf16": 4, "fp32": 4}
    assert by_precision["best"].to_dict() == {"bf16": 0.15, "fp32": 0.10}
    assert by_precision["median_samples_per_s"].to_dict() == {"bf16": 4100.0, "fp32": 5200.0}
    assert ns["precision_status"].loc["bf16", "failed"] == 1

    reached = ns["reached"]
    assert reached.loc["c3d4e5f6", "epochs"] == 1 and reached.loc["d4e5f6a7", "epochs"] == 3
    assert reached.loc["e5f6a7b8", "epochs"] == pytest.approx(40 / STEPS_PER_EPOCH)
    assert math.isnan(reached.loc["f6a7b8c9", "epochs"])
    rungs = ns["rungs"]
    assert rungs.to_dict("index") == {
        1: {"reached": 7, "stopped_by_asha": 2, "continued": 3},
        3: {"reached": 3, "stopped_by_asha": 1, "continued": 2},
        6: {"reached": 2, "stopped_by_asha": 0, "continued": 0},
    }
    # Optuna's importance and parallel coordinates, on the trials compared at the first
    # rung (the highest milestone at least 5 trials reached): all but the failed one.
    study = ns["study"]
    assert study.user_attrs["budget"] == "epoch 1" and len(study.trials) == 7
    assert set(ns["importance"]) == {"lr", "warmup_steps", "precision"}
    assert ns["saved"] is None  # this sweep has no saved study
    # curves, lr, funnel, importance, parallel coordinates: every plot drew something.
    titles = [ax.get_title() for fig in ns["_figures"] for ax in fig.axes]
    assert len(ns["_figures"]) == 5, titles
    assert all(fig.axes and fig.axes[0].has_data() for fig in ns["_figures"]), titles

    reports = sum(len(losses) for _, losses, _ in TRIALS.values())
    out = capsys.readouterr().out
    assert f"sweep quickstart (running): 8 trials, {reports} reports" in out
    assert "compared at epoch 1: 7 trials" in out


def test_notebook_opens_the_saved_study_when_the_sweep_has_one(sweep_dir, monkeypatch, capsys):
    import optuna

    from hpsearch.report import load_sweep
    from hpsearch.report._study import distributions, storage_at

    sweep = SweepDir(sweep_dir)  # the study file SweepDir names, whatever its format
    study = optuna.create_study(study_name=sweep.name, storage=storage_at(sweep.optuna))
    dists = distributions(load_sweep(sweep))
    for params, losses, _ in TRIALS.values():
        if losses and losses[-1] != "diverged":
            study.add_trial(optuna.trial.create_trial(
                params=params, distributions={k: dists[k] for k in params}, value=losses[-1]))
    ns = run_notebook(sweep_dir, monkeypatch)
    assert ns["saved"] is not None and len(ns["saved"].trials) == 6
    assert "saved study 'quickstart': 6 Optuna trials" in capsys.readouterr().out


def test_notebook_reads_the_front_of_a_sweep_of_several_objectives(tmp_path, monkeypatch):
    # The quickstart with samples_per_s as a second objective and a constraint: a1b2c3d4
    # (fp32: 5200 samples/s, val_loss 0.10) dominates b2c3d4e5 (bf16: 4100, 0.15), the
    # other trial that completed, so the front is a1b2c3d4 alone.
    raw = dict(load_space(ROOT / "search_spaces" / "quickstart.yaml").raw)
    raw["objective"] = [{"metric": "val_loss", "mode": "min"},
                        {"metric": "samples_per_s", "mode": "max"}]
    raw["constraints"] = [{"metric": "val_accuracy", "min": 0.5}]
    raw["scheduler"] = {**raw["scheduler"], "brackets": 1}  # MO-ASHA has one bracket
    sweep = write_sweep(tmp_path, raw)
    ns = run_notebook(sweep, monkeypatch)
    assert list(ns["front"]["trial_id"]) == ["a1b2c3d4"]
    assert ns["NAMES"] == ["val_loss", "samples_per_s"]
    assert len(ns["_figures"]) >= 1
