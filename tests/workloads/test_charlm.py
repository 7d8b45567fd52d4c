import math
import sysconfig

import pytest
import torch

from hpsearch.train import LocalSession, train
from hpsearch.workloads import charlm

TINY = {"n_layer": 1, "n_embd": 32, "n_head": 2, "block_size": 32, "samples_per_epoch": 256,
        "val_samples": 64, "corpus_bytes": 200_000, "batch_size": 32}


def test_corpus_is_the_standard_library_source_capped_and_repeatable():
    data = charlm.corpus(100_000)
    assert data.dtype == torch.uint8 and len(data) == 100_000
    assert torch.equal(data, charlm.corpus.__wrapped__(100_000))
    text = bytes(data[:20_000].tolist()).decode("utf-8", errors="replace")
    assert "def " in text and "import " in text
    assert sysconfig.get_paths()["stdlib"]  # where it came from, on every machine with Python


def test_windows_are_shifted_by_one_byte():
    train_set, val_set = charlm.build_data(TINY)
    x, y = train_set.get_batch(torch.arange(4))
    assert x.shape == y.shape == (4, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])
    item_x, item_y = train_set[2]
    assert torch.equal(item_x, x[2]) and torch.equal(item_y, y[2])
    assert len(train_set) == 256 and len(val_set) == 64


def test_training_windows_are_redrawn_each_epoch_as_a_function_of_seed_and_epoch():
    a, _ = charlm.build_data({**TINY, "seed": 3})
    b, _ = charlm.build_data({**TINY, "seed": 3})
    a.set_epoch(1), b.set_epoch(1)
    assert torch.equal(a.offsets, b.offsets)
    first = a.offsets.clone()
    a.set_epoch(2)
    assert not torch.equal(a.offsets, first)
    c, _ = charlm.build_data({**TINY, "seed": 4})
    c.set_epoch(1)
    assert not torch.equal(c.offsets, first)


def test_validation_windows_come_from_the_held_out_tail_and_never_change():
    train_set, val_set = charlm.build_data(TINY)
    data = charlm.corpus(200_000)
    assert torch.equal(val_set.data, data[180_000:]) and torch.equal(train_set.data, data[:180_000])
    before = val_set.offsets.clone()
    val_set.set_epoch(5)
    assert torch.equal(val_set.offsets, before)


def test_default_model_size_is_in_the_documented_range():
    n = sum(p.numel() for p in charlm.build_model({}).parameters())
    assert n == 120_576


def test_model_is_causal():
    torch.manual_seed(0)
    model = charlm.build_model(TINY).eval()
    x = torch.randint(0, 256, (1, 32))
    changed = x.clone()
    changed[0, 20] = (changed[0, 20] + 1) % 256
    a, b = model(x), model(changed)
    assert torch.allclose(a[0, :20], b[0, :20], atol=1e-6)
    assert not torch.allclose(a[0, 20:], b[0, 20:], atol=1e-6)


def test_rejects_bad_shapes_naming_the_key():
    with pytest.raises(ValueError, match="n_embd: must be a multiple of n_head"):
        charlm.build_model({"n_embd": 30, "n_head": 4})
    with pytest.raises(ValueError, match="exceeds block_size"):
        charlm.build_model(TINY)(torch.zeros(1, 33, dtype=torch.long))


def test_learning_rate_visibly_changes_the_result():
    def final_val_loss(lr):
        session = LocalSession()
        train({"lr": lr, "epochs": 2, **TINY}, charlm.WORKLOAD, session)
        return session.reports[-1]["val_loss"]

    fast, slow = final_val_loss(1e-2), final_val_loss(1e-4)
    assert fast < slow - 0.5
    assert slow < math.log(256) + 0.1


def test_asking_for_more_source_than_the_standard_library_has_is_one_clear_error():
    import pathlib

    import yaml

    with pytest.raises(ValueError, match=r"config.corpus_bytes: asks for 1,000,000,000 bytes, "
                                         r"but the standard library of this Python has"):
        charlm.corpus(10**9)
    # the shipped GPU space asks for no more than exists
    space = pathlib.Path(__file__).parents[2] / "search_spaces" / "gpu-ddp.yaml"
    asked = yaml.safe_load(space.read_text())["params"]["corpus_bytes"]
    assert len(charlm.corpus(asked)) == asked
