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


def test_a_restarted_hf_trial_continues_from_its_newest_checkpoint(tmp_path):
    """A retry or a resumed sweep runs the trial again in its folder: the Trainer gets
    ``--resume_from_checkpoint=<trial_dir>/checkpoint-20`` (the newest, not checkpoint-10)
    and evaluates only the steps after it."""
    pytest.importorskip("transformers")
    overrides = ["scheduler.max_t=20", "trainable.command=" + (
        "python train.py --output_dir={trial_dir} --learning_rate={learning_rate} "
        "--warmup_steps={warmup_steps} --max_steps={max_t} --eval_steps=10 --save_steps=10 "
        "--seed={seed}")]
    first, trial = run_example("hf_trainer", overrides, tmp_path)
    assert [r["step"] for r in first] == [10, 20]
    overrides[0] = "scheduler.max_t=40"
    again, _ = run_example("hf_trainer", overrides, tmp_path)
    assert [r["step"] for r in again] == [30, 40]
    headers = [ln for ln in (trial / "output.log").read_text(errors="replace").splitlines()
               if ln.startswith("# hpsearch")]
    assert headers[1].endswith(f"--resume_from_checkpoint={trial}/checkpoint-20")


def test_lightning_script_reports_each_validation_from_its_csv(tmp_path):
    pytest.importorskip("lightning")
    reports, trial = run_example("lightning", ["scheduler.max_t=3"], tmp_path)
    assert [(r["epoch"], r["step"]) for r in reports] == [(1, 23), (2, 46), (3, 69)]
    assert all(0 < r["val_acc"] <= 1 for r in reports)
    assert (trial / "logs" / "version_0" / "metrics.csv").exists()
