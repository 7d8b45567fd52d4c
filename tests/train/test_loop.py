import math

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from hpsearch.train import LocalSession, Workload, train
from hpsearch.train import checkpoint
from hpsearch.train import precision as precision_module
from hpsearch.workloads import charlm, digits

from .conftest import comparable

REPORT_KEYS = {
    "step", "epoch", "lr", "train_loss", "val_loss", "val_accuracy", "grad_norm", "samples_per_s",
    "peak_mem_mb", "gpu_util_pct", "precision", "fp32_matmul", "skipped_steps", "status",
    "first_step_at",
}
TINY_LM = {"n_layer": 1, "n_embd": 16, "n_head": 2, "block_size": 16, "samples_per_epoch": 96,
           "val_samples": 32, "corpus_bytes": 50_000, "batch_size": 32}


def run(config, workload=digits.WORKLOAD, **session_kwargs):
    session = LocalSession(**session_kwargs)
    result = train(config, workload, session)
    return result, session.reports


def test_reports_carry_documented_keys_with_integer_epochs_at_epoch_ends():
    result, reports = run({"lr": 3e-3, "epochs": 3})
    assert [r["epoch"] for r in reports] == [1, 2, 3]
    assert all(type(r["epoch"]) is int for r in reports)
    assert all(set(r) == REPORT_KEYS for r in reports)
    assert [r["step"] for r in reports] == [22, 44, 66]  # 1438 training images // 64
    assert [r["status"] for r in reports] == ["running", "running", "completed"]
    assert reports[-1]["val_loss"] < reports[0]["val_loss"]
    assert reports[-1]["val_accuracy"] > 0.8
    assert all(r["precision"] == "fp32" and r["skipped_steps"] == 0 for r in reports)
    assert all(r["peak_mem_mb"] is None and r["samples_per_s"] > 0 for r in reports)
    assert all(r["gpu_util_pct"] is None for r in reports)  # no GPU, no NVML reading
    assert result.status == "completed" and result.metrics == reports[-1] and result.epoch == 3


def test_reported_lr_is_the_schedule_at_the_last_step():
    _, reports = run({"lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 30, "epochs": 3})
    from hpsearch.train import lr_at

    expected = [lr_at(s - 1, lr=1e-2, warmup_steps=30, total_steps=66, min_lr=1e-3) for s in (22, 44, 66)]
    assert [r["lr"] for r in reports] == pytest.approx(expected)
    assert reports[0]["lr"] < 1e-2 and reports[-1]["lr"] == pytest.approx(1e-3, rel=0.05)


def test_same_seed_gives_identical_reports():
    config = {"lr": 3e-3, "epochs": 2, "seed": 7}
    assert comparable(run(config)[1]) == comparable(run(config)[1])


def test_different_seed_gives_different_reports():
    a = run({"lr": 3e-3, "epochs": 1, "seed": 1})[1]
    b = run({"lr": 3e-3, "epochs": 1, "seed": 2})[1]
    assert a[0]["train_loss"] != b[0]["train_loss"]


def test_eval_every_reports_fractional_epochs_mid_epoch():
    _, reports = run({"lr": 3e-3, "epochs": 2, "eval_every": 11})
    assert [r["step"] for r in reports] == [11, 22, 33, 44]
    assert [r["epoch"] for r in reports] == [0.5, 1, 1.5, 2]
    assert type(reports[1]["epoch"]) is int


def test_max_steps_ends_the_run_mid_epoch_as_completed():
    result, reports = run({"lr": 3e-3, "max_steps": 30})
    assert [r["step"] for r in reports] == [22, 30]
    assert reports[-1]["status"] == "completed"
    assert reports[-1]["epoch"] == pytest.approx(1 + 8 / 22)
    assert result.step == 30


def test_earlier_of_epochs_and_max_steps_ends_the_run():
    _, reports = run({"lr": 3e-3, "max_steps": 500, "epochs": 1})
    assert [r["step"] for r in reports] == [22]


def test_global_batch_size_sets_steps_per_epoch():
    _, reports = run({"lr": 3e-3, "epochs": 1, "batch_size": 128})
    assert reports[0]["step"] == 1438 // 128


def test_grad_norm_is_reported_with_clipping_disabled():
    _, reports = run({"lr": 3e-3, "epochs": 1, "grad_clip": 0})
    assert math.isfinite(reports[0]["grad_norm"]) and reports[0]["grad_norm"] > 0


def digits_blowing_up_at(step: int, training_steps: list) -> Workload:
    """digits whose training loss becomes infinite from training step ``step`` on; each
    training step appends to ``training_steps``."""

    def loss(model, batch):
        x, y = batch
        logits = model(x)
        value = nn.functional.cross_entropy(logits, y)
        if model.training:
            training_steps.append(1)
            if len(training_steps) >= step:
                return value * math.inf, logits
        return value, logits

    return Workload(digits.build_model, digits.build_data, loss=loss, metrics=digits.WORKLOAD.metrics)


def test_nonfinite_loss_ends_the_trial_with_one_diverged_report():
    training_steps = []
    workload = digits_blowing_up_at(25, training_steps)
    result, reports = run({"lr": 3e-3, "epochs": 5}, workload)
    assert [r["status"] for r in reports] == ["running", "diverged"]
    last = reports[-1]
    assert math.isnan(last["val_loss"]) and not math.isfinite(last["train_loss"])
    assert math.isnan(last["val_accuracy"])  # the metric's column survives, as NaN
    assert "non-finite" in last["reason"]
    assert result.status == "diverged" and result.reason == last["reason"]
    assert 25 <= result.step < 44  # caught between reports, not only at the next one
    assert len(training_steps) == result.step  # and training stopped there


def test_fp16_counts_skipped_steps(tmp_path):
    # An initial scale of 2**40 overflows fp16 gradients, so the scaler skips steps, halving
    # the scale each time, until the scaled gradients fit; its growth interval (2000 steps)
    # is never reached, so every halving is one skipped step.
    config = {"lr": 3e-3, "epochs": 3, "precision": "fp16", "loss_scale_init": 2.0**40}
    result, reports = run(config, root=str(tmp_path))
    final_scale = checkpoint.load(reports[-1]["checkpoint"])["scaler"]["scale"]
    skipped = reports[-1]["skipped_steps"]
    assert skipped == round(math.log2(2.0**40 / final_scale)) > 5
    assert reports[0]["skipped_steps"] == skipped  # all in the first epoch; then it settles
    assert result.status == "completed" and reports[-1]["precision"] == "fp16"
    assert reports[-1]["val_loss"] < reports[0]["val_loss"]


def test_fp16_with_default_scale_skips_nothing_and_matches_fp32_closely():
    fp16 = run({"lr": 3e-3, "epochs": 2, "precision": "fp16"})[1]
    fp32 = run({"lr": 3e-3, "epochs": 2})[1]
    assert fp16[-1]["skipped_steps"] == 0
    assert fp16[-1]["val_loss"] == pytest.approx(fp32[-1]["val_loss"], rel=0.02)


def test_bf16_trains_under_cpu_autocast():
    _, reports = run({"lr": 3e-3, "epochs": 2, "precision": "bf16"})
    assert reports[-1]["precision"] == "bf16" and reports[-1]["val_accuracy"] > 0.8


def test_unsupported_precision_ends_the_trial_with_its_own_status(monkeypatch):
    # No CPU lacks bf16 autocast in this torch, so pretend this one does: the probe is the
    # only part replaced; the loop's handling runs for real.
    monkeypatch.setattr(precision_module, "_autocast_runs", lambda device, dtype: False)
    built = []
    workload = Workload(lambda c: built.append(1) or digits.build_model(c), digits.build_data)
    result, reports = run({"lr": 3e-3, "epochs": 2, "precision": "bf16"}, workload)
    assert len(reports) == 1
    assert reports[0]["status"] == "unsupported_precision" and "bf16" in reports[0]["reason"]
    assert math.isnan(reports[0]["val_loss"]) and reports[0]["step"] == 0
    assert result.status == "unsupported_precision" and built == []  # nothing was built


def test_weight_decay_shrinks_matrices_but_not_biases():
    models = []

    def build(config):
        models.append(digits.build_model(config))
        return models[-1]

    def no_gradient_signal(model, batch):
        return (model(batch[0]) * 0).sum()  # Adam's update is 0; only decoupled decay acts

    workload = Workload(build, digits.build_data, loss=no_gradient_signal)
    torch.manual_seed(0)
    before = {k: v.clone() for k, v in digits.build_model({}).state_dict().items()}
    run({"lr": 0.1, "min_lr": 0.1, "weight_decay": 0.5, "epochs": 1, "grad_clip": 0}, workload)
    after = models[0].state_dict()
    assert torch.allclose(after["0.weight"], before["0.weight"] * (1 - 0.1 * 0.5) ** 22, atol=1e-6)
    assert torch.equal(after["0.bias"], before["0.bias"])


def test_user_workload_with_plain_dataset_and_dict_batches():
    class Pairs(torch.utils.data.Dataset):
        def __init__(self, n):
            g = torch.Generator().manual_seed(n)
            self.x = torch.randn(n, 4, generator=g)
            self.y = (self.x.sum(1) > 0).long()

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"x": self.x[i], "y": self.y[i]}

    def loss(model, batch):
        logits = model(batch["x"])
        return nn.functional.cross_entropy(logits, batch["y"]), logits

    def agreement(logits, batch):
        return {"agree": (logits.argmax(-1) == batch["y"]).float().mean().item()}

    workload = Workload(lambda c: nn.Linear(4, 2), lambda c: (Pairs(256), Pairs(64)), loss=loss, metrics=agreement)
    _, reports = run({"lr": 0.05, "epochs": 3, "batch_size": 32}, workload)
    assert reports[-1]["val_agree"] > 0.8 and reports[-1]["val_loss"] < reports[0]["val_loss"]


def test_charlm_trains_with_resampled_windows_per_epoch():
    _, reports = run({"lr": 1e-2, "epochs": 2, **TINY_LM}, charlm.WORKLOAD)
    assert [r["step"] for r in reports] == [3, 6]
    assert reports[-1]["val_loss"] < math.log(256)
    assert reports[-1]["val_bits_per_byte"] == pytest.approx(reports[-1]["val_loss"] / math.log(2), rel=1e-4)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"epochs": 1}, "config.lr: required"),
        ({"lr": 1e-3}, "one of epochs, max_steps is required"),
        ({"lr": -1.0, "epochs": 1}, r"config.lr: must be > 0 \(got -1\)"),
        ({"lr": 1e-3, "epochs": 1, "precision": "fp8"}, "config.precision: must be one of fp32, tf32, bf16, fp16"),
        ({"lr": 1e-3, "epochs": 1.5}, "config.epochs: must be an integer"),
        ({"lr": 1e-3, "epochs": 1, "min_lr": 1.0}, "config.min_lr: must be <= lr"),
        ({"lr": 1e-3, "epochs": 1, "batch_size": 4096}, "larger than the training set"),
        ({"lr": 1e-3, "epochs": 1, "beta2": 1.0}, "config.beta2: must be < 1"),
    ],
)
def test_config_errors_raise_naming_key_rule_and_value(config, message):
    with pytest.raises(ValueError, match=message):
        train(config, digits.WORKLOAD, LocalSession())


def test_tensor_dataset_on_a_tiny_problem_converges():
    x = torch.linspace(-1, 1, 128).unsqueeze(1)
    y = (x[:, 0] > 0).long()
    workload = Workload(lambda c: nn.Linear(1, 2), lambda c: (TensorDataset(x, y), TensorDataset(x, y)))
    _, reports = run({"lr": 0.1, "epochs": 10, "batch_size": 16}, workload)
    assert reports[-1]["val_loss"] < 0.3


def test_loop_calls_set_epoch_on_the_training_set_before_each_epoch():
    epochs_seen = []

    class EpochAware(TensorDataset):
        def set_epoch(self, epoch):
            epochs_seen.append(epoch)

    def build_data(config):
        train_set, val_set = digits.build_data(config)
        return EpochAware(*train_set.tensors), val_set

    run({"lr": 3e-3, "epochs": 3}, Workload(digits.build_model, build_data))
    assert epochs_seen == [0, 1, 2]


@pytest.mark.parametrize(("n", "world_size"), [(1438, 1), (1438, 2), (1439, 2), (100, 3), (7, 4)])
def test_epoch_batches_follow_distributed_sampler_order(n, world_size):
    from torch.utils.data import DistributedSampler

    from hpsearch.train.batches import index_chunks

    dataset = TensorDataset(torch.zeros(n))
    for rank in range(world_size):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=5,
                                     drop_last=True)
        for epoch in (0, 3):
            sampler.set_epoch(epoch)
            expected = list(sampler)
            chunks = index_chunks(sampler, 2)
            got = torch.cat(chunks).tolist() if chunks else []
            assert got == expected[: len(expected) // 2 * 2]


def test_log_every_records_training_between_reports_without_changing_training():
    config = {"lr": 3e-3, "epochs": 2, "warmup_steps": 20, "grad_clip": 0.0}
    _, plain = run(config)
    _, logged = run({**config, "log_every": 5})
    # Same training and the same evaluations: logging neither evaluates nor perturbs.
    assert comparable([{k: v for k, v in r.items() if k != "train_log"} for r in logged]) \
        == comparable(plain)
    steps = [[row["step"] for row in r["train_log"]] for r in logged]
    assert steps == [[5, 10, 15, 20], [25, 30, 35, 40]]  # 22 and 44 are the reports
    rows = [row for r in logged for row in r["train_log"]]
    assert all(set(row) == {"step", "epoch", "lr", "train_loss", "grad_norm", "samples_per_s",
                            "peak_mem_mb", "gpu_util_pct", "age_s"} for row in rows)
    assert all(row["gpu_util_pct"] is None for row in rows)
    assert all(math.isfinite(row["train_loss"]) and row["grad_norm"] > 0 for row in rows)
    assert [row["epoch"] for row in rows[:2]] == pytest.approx([5 / 22, 10 / 22])
    # The warmup is visible between the evaluations: lr rises over the first 20 steps.
    from hpsearch.train import lr_at

    assert [row["lr"] for row in rows[:4]] == pytest.approx(
        [lr_at(s - 1, lr=3e-3, warmup_steps=20, total_steps=44, min_lr=3e-4) for s in (5, 10, 15, 20)])
    assert all(row["age_s"] >= 0 for row in rows)
    assert rows[0]["age_s"] > rows[3]["age_s"]  # older rows are older


def test_a_log_point_catches_divergence_and_its_rows_go_with_the_last_report():
    workload = digits_blowing_up_at(12, [])
    _, reports = run({"lr": 3e-3, "epochs": 2, "log_every": 4, "diverge_window": 16}, workload)
    assert [r["status"] for r in reports] == ["diverged"]
    last = reports[-1]
    # Caught at the log point of step 12, before the divergence window's step 16.
    assert last["step"] == 12 and not math.isfinite(last["train_loss"])
    assert [row["step"] for row in last["train_log"]] == [4, 8]
    assert all(math.isfinite(row["train_loss"]) for row in last["train_log"])
