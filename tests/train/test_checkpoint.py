import os
import random

import numpy as np
import pytest
import torch

from hpsearch.train import LocalSession, train
from hpsearch.train import checkpoint
from hpsearch.workloads import charlm, digits

from .conftest import comparable


class Interrupted(Exception):
    pass


def interrupt_after(n_reports):
    """An on_report hook that crashes the run after its n-th report, like a killed worker."""
    seen = []

    def hook(metrics):
        seen.append(metrics)
        if len(seen) == n_reports:
            raise Interrupted

    return hook


def run_interrupted_then_resumed(config, workload, root, n_reports):
    first = LocalSession(root=os.path.join(root, "first"), on_report=interrupt_after(n_reports))
    with pytest.raises(Interrupted):
        train(config, workload, first)
    second = LocalSession(root=os.path.join(root, "second"), resume_from=first.last_checkpoint)
    result = train(config, workload, second)
    return first.reports + second.reports, result


def test_resume_matches_uninterrupted_run(tmp_path):
    # Dropout makes the run depend on the generator states too, not only on the weights.
    config = {"lr": 3e-3, "epochs": 4, "dropout": 0.2, "warmup_steps": 10, "weight_decay": 0.1}
    straight = LocalSession()
    train(config, digits.WORKLOAD, straight)
    resumed, result = run_interrupted_then_resumed(config, digits.WORKLOAD, str(tmp_path), n_reports=2)
    assert [r["epoch"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(straight.reports, resumed):
        assert b["val_loss"] == pytest.approx(a["val_loss"], abs=1e-6)
        assert b["train_loss"] == pytest.approx(a["train_loss"], abs=1e-6)
    assert comparable(resumed) == comparable(straight.reports)
    assert result.status == "completed"


def test_resume_mid_epoch_matches_uninterrupted_run(tmp_path):
    # charlm redraws its windows every epoch (set_epoch), and eval_every=2 puts reports
    # (and checkpoints) in the middle of 3-step epochs.
    config = {"lr": 1e-2, "epochs": 3, "eval_every": 2, "n_layer": 1, "n_embd": 16, "n_head": 2,
              "block_size": 16, "samples_per_epoch": 96, "val_samples": 32, "corpus_bytes": 50_000,
              "batch_size": 32, "dropout": 0.1}
    straight = LocalSession()
    train(config, charlm.WORKLOAD, straight)
    resumed, _ = run_interrupted_then_resumed(config, charlm.WORKLOAD, str(tmp_path), n_reports=2)
    assert [r["step"] for r in resumed] == [2, 4, 6, 8, 9]
    assert resumed[1]["epoch"] == pytest.approx(4 / 3)
    assert comparable(resumed) == comparable(straight.reports)


def test_fp16_resume_restores_the_loss_scale_and_skip_count(tmp_path):
    config = {"lr": 3e-3, "epochs": 3, "precision": "fp16", "loss_scale_init": 2.0**30}
    straight = LocalSession()
    train(config, digits.WORKLOAD, straight)
    resumed, _ = run_interrupted_then_resumed(config, digits.WORKLOAD, str(tmp_path), n_reports=1)
    assert resumed[-1]["skipped_steps"] == straight.reports[-1]["skipped_steps"] > 0
    assert comparable(resumed) == comparable(straight.reports)


def test_checkpoint_is_one_dict_that_loads_safely(tmp_path):
    session = LocalSession(root=str(tmp_path))
    train({"lr": 3e-3, "epochs": 1, "note": np.float64(0.5)}, digits.WORKLOAD, session)
    path = session.reports[-1]["checkpoint"]
    assert os.listdir(path) == [checkpoint.CHECKPOINT_FILE]
    state = checkpoint.load(path)  # torch.load(weights_only=True) inside
    assert {"model", "optimizer", "scaler", "step", "epoch", "batch_in_epoch", "rng", "config"} <= set(state)
    assert state["step"] == 22 and state["epoch"] == 0 and state["batch_in_epoch"] == 22
    assert state["config"]["note"] == 0.5 and len(state["rng"]) == 1


def test_checkpoint_every_counts_reports_and_always_keeps_the_last(tmp_path):
    session = LocalSession(root=str(tmp_path), keep=10)
    train({"lr": 3e-3, "epochs": 5, "checkpoint_every": 2}, digits.WORKLOAD, session)
    assert ["checkpoint" in r for r in session.reports] == [False, True, False, True, True]


def test_checkpoint_every_zero_writes_none(tmp_path):
    session = LocalSession(root=str(tmp_path))
    train({"lr": 3e-3, "epochs": 2, "checkpoint_every": 0}, digits.WORKLOAD, session)
    assert not any("checkpoint" in r for r in session.reports) and not os.listdir(tmp_path)


def test_local_session_keeps_only_the_newest_checkpoints_and_cleans_up(tmp_path):
    session = LocalSession(root=str(tmp_path / "kept"), keep=2)
    train({"lr": 3e-3, "epochs": 4}, digits.WORKLOAD, session)
    assert sorted(os.listdir(tmp_path / "kept")) == ["checkpoint_000002", "checkpoint_000003"]
    assert session.last_checkpoint.endswith("checkpoint_000003")


def test_session_without_root_deletes_handed_over_checkpoints(tmp_path):
    handed = []
    session = LocalSession()
    original = session.report

    def spy(metrics, checkpoint_dir=None):
        handed.append(checkpoint_dir)
        original(metrics, checkpoint_dir)

    session.report = spy
    train({"lr": 3e-3, "epochs": 2}, digits.WORKLOAD, session)
    assert len(handed) == 2 and all(d is not None and not os.path.exists(d) for d in handed)


def test_resume_from_the_end_of_the_budget_reports_completed_without_training(tmp_path):
    first = LocalSession(root=str(tmp_path))
    train({"lr": 3e-3, "epochs": 2}, digits.WORKLOAD, first)
    again = LocalSession(resume_from=first.last_checkpoint)
    result = train({"lr": 3e-3, "epochs": 2}, digits.WORKLOAD, again)
    assert len(again.reports) == 1 and again.reports[0]["status"] == "completed"
    assert again.reports[0]["val_loss"] == pytest.approx(first.reports[-1]["val_loss"], abs=1e-7)
    assert result.step == 44


def test_rng_state_round_trips_every_generator():
    device = torch.device("cpu")
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    state = checkpoint.rng_state(device)
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(2), np.random.seed(2), random.seed(2)
    checkpoint.set_rng_state(state, device)
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]


def test_loading_a_directory_without_checkpoint_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint.pt"):
        checkpoint.load(str(tmp_path))
