import torch

from hpsearch.train import LocalSession, train
from hpsearch.workloads import digits


def test_split_is_fixed_by_data_seed_not_by_the_trial_seed():
    a_train, a_val = digits.build_data({"seed": 1})
    b_train, b_val = digits.build_data({"seed": 2})
    assert torch.equal(a_val.tensors[0], b_val.tensors[0])
    c_train, c_val = digits.build_data({"data_seed": 5})
    assert not torch.equal(a_val.tensors[0], c_val.tensors[0])
    assert (len(a_train), len(a_val)) == (1438, 359)


def test_held_out_images_are_not_in_the_training_set():
    train_set, val_set = digits.build_data({})
    train_rows = {tuple(r.tolist()) for r in train_set.tensors[0]}
    val_rows = [tuple(r.tolist()) for r in val_set.tensors[0]]
    # A few digits images are exact duplicates of each other in the source data.
    assert sum(r in train_rows for r in val_rows) < 5
    assert set(val_set.tensors[1].tolist()) == set(range(10))


def test_pixels_are_scaled_to_unit_range():
    train_set, _ = digits.build_data({})
    x = train_set.tensors[0]
    assert x.shape[1] == 64 and x.min() == 0 and x.max() == 1


def test_default_model_has_the_documented_size_and_config_changes_it():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(digits.build_model({})) == 4810
    assert count(digits.build_model({"hidden": 32, "depth": 2})) == 64 * 32 + 32 + 32 * 32 + 32 + 32 * 10 + 10
    assert any(isinstance(m, torch.nn.Dropout) for m in digits.build_model({"dropout": 0.1}).modules())


def test_digits_reaches_high_accuracy_in_a_few_epochs():
    session = LocalSession()
    train({"lr": 1e-2, "epochs": 8}, digits.WORKLOAD, session)
    assert session.reports[-1]["val_accuracy"] > 0.93


def test_digits_read_without_sklearn_import_equal_load_digits():
    from sklearn.datasets import load_digits

    from hpsearch.workloads.digits import _bundled_digits_csv, _digits

    assert _bundled_digits_csv() is not None
    x, y = _digits()
    bunch = load_digits()
    assert torch.equal(x, torch.tensor(bunch.data, dtype=torch.float32) / 16.0)
    assert torch.equal(y, torch.tensor(bunch.target, dtype=torch.long))
