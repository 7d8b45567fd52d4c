"""``--set`` overrides: parsing, the short form, and how they show up in errors."""

from __future__ import annotations

import pytest

from hpsearch.errors import SpaceError
from hpsearch.space import apply_overrides, load_space

RAW = {
    "trainable": "charlm",
    "objective": {"metric": "val_loss", "mode": "min"},
    "params": {
        "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
        "precision": {"type": "categorical", "choices": ["fp32", "bf16", "fp16"]},
        "batch_size": 64,
    },
    "trials": {"num": 32},
}


@pytest.mark.parametrize(
    ("item", "path", "value"),
    [
        ("trials.num=4", ("trials", "num"), 4),
        ("params.lr.high=0.1", ("params", "lr", "high"), 0.1),
        ("params.lr.low=1e-5", ("params", "lr", "low"), 1e-5),
        ("params.precision=bf16", ("params", "precision"), "bf16"),
        ("params.precision.choices=[fp32,bf16]", ("params", "precision", "choices"), ["fp32", "bf16"]),
        ("lr=0.01", ("params", "lr"), 0.01),
        ("lr.high=0.1", ("params", "lr", "high"), 0.1),
        ("budget.time=2h", ("budget", "time"), "2h"),
        ("search.seed=null", ("search", "seed"), None),
        ("resources.use_gpu=true", ("resources", "use_gpu"), True),
        (" trials.num = 4 ", ("trials", "num"), 4),
        ("name=a=b", ("name",), "a=b"),
        ("params.new_param=3", ("params", "new_param"), 3),
    ],
)
def test_override_sets_the_value_parsed_as_yaml(item, path, value):
    out = apply_overrides(RAW, [item])
    node = out
    for key in path:
        node = node[key]
    assert node == value


def test_overrides_apply_in_order_and_leave_the_input_alone():
    out = apply_overrides(RAW, ["trials.num=4", "trials.num=5"])
    assert out["trials"]["num"] == 5
    assert RAW["trials"]["num"] == 32


def test_plain_value_for_a_searched_param_makes_it_fixed(tmp_path):
    from hpsearch.space import parse_space

    spec = parse_space(RAW, overrides=["lr=0.01", "precision=bf16"])
    assert [p.name for p in spec.params] == []
    assert spec.fixed == {"lr": 0.01, "precision": "bf16", "batch_size": 64}


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ("trials.num", "KEY.PATH=VALUE"),
        ("=4", "KEY.PATH=VALUE"),
        ("trials..num=4", "empty key"),
        ("trials.num=", "no value"),
        ("trails.num=4", "did you mean `trials`"),
        ("lrr=0.1", "did you mean `lr`"),
        ("trials.num=[1,", "cannot read the value"),
        ("trials.num=!!python/object/apply:os.getcwd []", "not allowed"),
        ("params.batch_size.high=3", "not a mapping"),
        ("trials.num.x=3", "not a mapping"),
    ],
)
def test_malformed_override_is_reported_under_the_set_path(item, fragment):
    with pytest.raises(SpaceError) as info:
        apply_overrides(RAW, [item])
    (issue,) = info.value.issues
    assert (issue.path, issue.kind) == ("--set", "override")
    assert fragment in issue.message


def test_every_malformed_override_is_reported_at_once():
    with pytest.raises(SpaceError) as info:
        apply_overrides(RAW, ["a", "b", "trials.num=4"])
    assert len(info.value.issues) == 2


def test_an_invalid_overridden_value_points_at_the_override(tmp_path):
    from .conftest import VALID

    file = tmp_path / "lm.yaml"
    file.write_text(VALID)
    with pytest.raises(SpaceError) as info:
        load_space(file, ["params.lr.high=0.00001"])
    (issue,) = info.value.issues
    assert issue.path == "params.lr.high" and issue.kind == "range"
    assert str(issue).endswith("[--set params.lr.high=0.00001]")


def test_narrowing_choices_drops_a_condition_that_can_no_longer_hold(tmp_path):
    from .conftest import VALID

    file = tmp_path / "lm.yaml"
    file.write_text(VALID)
    spec = load_space(file, ["params.precision.choices=[fp32,bf16]"])
    assert spec.param("precision").choices == ("fp32", "bf16")
    assert "loss_scale_init" not in [p.name for p in spec.params]
