"""The bring-your-own-model examples in examples/ run, and their space files load."""

import importlib
import pathlib

import pytest

import hpsearch
from hpsearch.train import LocalSession, train

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def examples(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))  # as `python -m` from the repository root
    return lambda name: importlib.import_module(f"examples.{name}")


def test_harness_mode_example_trains_under_the_harness(examples):
    workload = examples("harness_mode").WORKLOAD
    session = LocalSession()
    result = train({"lr": 5e-3, "epochs": 2, "channels": 8}, workload, session)
    assert result.status == "completed"
    assert session.reports[-1]["val_accuracy"] > 0.7


@pytest.mark.parametrize("name", ["harness_mode", "raw_mode"])
def test_example_space_files_load_and_name_their_module(name, monkeypatch):
    monkeypatch.chdir(REPO)
    spec = hpsearch.load_space(str(REPO / "examples" / f"{name}.yaml"))
    assert spec.trainable.startswith(f"examples.{name}:")
    assert "epochs" in spec.trial_config({"lr": 1e-2})


def test_raw_mode_example_reports_integer_epochs_and_the_objective(examples):
    # Ray Train's local mode (num_workers=0) runs the loop in this process: no Ray cluster.
    ray = pytest.importorskip("ray")
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    loop = examples("raw_mode").train_loop_per_worker
    trainer = TorchTrainer(
        loop,
        train_loop_config={"lr": 0.1, "epochs": 2, "batch_size": 64},
        scaling_config=ScalingConfig(num_workers=0),
        run_config=RunConfig(name="raw-mode-test"),
    )
    result = trainer.fit()
    assert not ray.is_initialized()
    assert result.metrics["epoch"] == 2 and result.metrics["val_loss"] < 1.0
