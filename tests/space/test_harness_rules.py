"""A space is checked against the training harness's published rules (train/keys.py):
every fixed value, both ends of every searched range and every choice, with the key path
and line, before any trial starts. A raw Ray Train loop gets no harness rules."""

from __future__ import annotations


import pytest

from hpsearch.errors import SpaceError
from hpsearch.space import load_space, parse_space
from hpsearch.train.keys import KEYS, HarnessConfig

from .conftest import VALID


def sub(old: str, new: str) -> str:
    assert VALID.count(old) == 1, old
    return VALID.replace(old, new)


LR = "lr:           {type: float, low: 1.0e-4, high: 3.0e-2, log: true}"
WD = "weight_decay: {type: float, low: 0.0, high: 0.1}"


@pytest.mark.parametrize(
    "text, path, kind, fragment",
    [
        (sub(LR, "lr: {type: float, low: 0.0, high: 0.1}"), "params.lr.low", "range", "must be > 0"),
        (sub(WD, "beta1: {type: float, low: 0.8, high: 1.0}"), "params.beta1.high", "range", "must be < 1"),
        (sub(WD, "grad_clip: {type: float, low: -1.0, high: 1.0}"), "params.grad_clip.low", "range", ">= 0"),
        (sub("batch_size: 64", "batch_size: {type: int, low: 0, high: 64}"), "params.batch_size.low", "range", ">= 1"),
        (sub("batch_size: 64", "batch_size: {type: categorical, choices: [32, 0]}"), "params.batch_size.choices[1]", "range", ">= 1"),
        (sub("batch_size: 64", "batch_size: 0"), "params.batch_size", "range", ">= 1"),
        (sub("batch_size: 64", "batch_size: big"), "params.batch_size", "type", "must be a number"),
        (sub("batch_size: 64", "batch_size: 12.5"), "params.batch_size", "range", "integer"),
        (sub("[fp32, bf16, fp16]", "[fp32, fp8]"), "params.precision.choices[1]", "choice", "fp32, tf32, bf16, fp16"),
        (sub("warmup_steps: {type: int, low: 0, high: 400, step: 50}", "warmup_steps: {type: int, low: -50, high: 400, step: 50}"), "params.warmup_steps.low", "range", ">= 0"),
    ],
)
def test_values_the_harness_refuses_are_found_at_validate(write, text, path, kind, fragment):
    with pytest.raises(SpaceError) as err:
        load_space(write(text))
    issues = [i for i in err.value.issues if i.path == path]
    assert issues and issues[0].kind == kind, err.value
    assert fragment in issues[0].message
    assert issues[0].line is not None


def test_the_last_value_a_step_reaches_is_what_is_checked(write):
    # 0.9 + k*0.05 reaches 1.0 itself: beta1 must stay below 1.
    text = sub(WD, "beta1: {type: float, low: 0.9, high: 1.0, step: 0.05}")
    with pytest.raises(SpaceError, match=r"params\.beta1\.high"):
        load_space(write(text))
    ok = load_space(write(sub(WD, "beta1: {type: float, low: 0.9, high: 0.95, step: 0.05}")))
    assert ok.param("beta1").high == 0.95


def test_rules_between_keys_are_checked_on_the_default_config(write):
    with pytest.raises(SpaceError, match="min_lr: must be <= lr"):
        load_space(write(sub("batch_size: 64", "batch_size: 64\n  min_lr: 1.0")))


def test_a_raw_loop_gets_no_harness_rules(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rawloop.py").write_text("def train_loop(config):\n    pass\n")
    raw = {"trainable": "rawloop:train_loop", "objective": {"metric": "val_mse", "mode": "min"},
           "params": {"batch_size": 0, "precision": "fp8"}}
    spec = parse_space(raw)
    assert spec.fixed == {"batch_size": 0, "precision": "fp8"}


def test_every_key_the_loop_reads_has_a_rule():
    assert set(KEYS) == set(HarnessConfig.__dataclass_fields__)


class CountingInt(int):
    """An int that counts the equality comparisons made on it (hashes stay an int's)."""

    compared = 0

    def __eq__(self, other):
        CountingInt.compared += 1
        return int.__eq__(self, other)

    __hash__ = int.__hash__


def test_the_duplicate_check_on_choices_is_linear():
    # A quadratic check (each choice against every earlier one) makes n*(n-1)/2 = 12.5
    # million comparisons here; 90,000 choices took 127 s that way. A linear one hashes.
    import yaml

    n = 5_000
    CountingInt.compared = 0
    valid = yaml.safe_load(VALID)
    raw = {**valid, "params": {**valid["params"], "width": {
        "type": "categorical", "choices": [CountingInt(i) for i in range(n)]}}}
    spec = parse_space(raw)
    assert len(spec.param("width").choices) == n
    assert CountingInt.compared < n
    raw["params"]["width"]["choices"].append(CountingInt(7))  # a duplicate is still found
    with pytest.raises(SpaceError, match=r"duplicate choice 7 \(same as choices\[7\]\)"):
        parse_space(raw)
