"""The framework recipes' real scripts (examples/hf_trainer, examples/lightning) run as one
command trial outside Ray (what ``hpsearch trial`` runs), their real output and files read
into reports: each evaluation once, at the framework's own step or epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.driver.trials.resolve import resolve_runner
from hpsearch.space import load_space

EXAMPLES = Path(__file__).parents[2] / "examples"


def run_example(name: str, overrides: list[str], storage: Path) -> tuple[list[dict], Path]:
    spec = load_space(str(EXAMPLES / name / "space.yaml"), overrides)
    sampled = {"learning_rate": 3e-3, "warmup_steps": 2} if name == "hf_trainer" else \
        {"lr": 0.05, "hidden": 32}
    config = spec.trial_config(sampled)
    reports = resolve_runner(spec).run_alone(config, storage=str(storage))
    return reports, storage / "trial"


def test_hf_trainer_script_reports_each_evaluation_at_its_step(tmp_path):
    pytest.importorskip("transformers")
    reports, trial = run_example("hf_trainer", ["scheduler.max_t=30"], tmp_path)
    assert [r["step"] for r in reports] == [10, 20, 30]
    assert all(r["eval_loss"] > 0 for r in reports) and reports[-1]["epoch"] > 0
    assert reports[-1]["eval_loss"] < reports[0]["eval_loss"]
    # the Trainer shares its output_dir with hpsearch's output.log without complaint
    assert {"output.log", "checkpoint-20", "checkpoint-30"} <= {p.name for p in trial.iterdir()}


def test_lightning_script_reports_each_validation_from_its_csv(tmp_path):
    pytest.importorskip("lightning")
    reports, trial = run_example("lightning", ["scheduler.max_t=3"], tmp_path)
    assert [(r["epoch"], r["step"]) for r in reports] == [(1, 23), (2, 46), (3, 69)]
    assert all(0 < r["val_acc"] <= 1 for r in reports)
    assert (trial / "logs" / "version_0" / "metrics.csv").exists()
