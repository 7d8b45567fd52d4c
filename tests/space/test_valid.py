"""Valid spaces: what the spec holds, defaults, conditions, examples and the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpsearch.errors import SpaceError
from hpsearch.space import (
    CategoricalParam,
    Condition,
    FloatParam,
    IntParam,
    load_space,
    parse_space,
    summarize,
)

from .conftest import VALID

EXAMPLES = sorted((Path(__file__).parents[2] / "search_spaces").glob("*.yaml"))
MINIMAL = {
    "trainable": "digits",
    "objective": {"metric": "val_loss", "mode": "min"},
    "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}},
}


def test_the_issue_example_loads_into_the_documented_spec(write):
    spec = load_space(write(VALID))
    assert spec.name == "lm-test"
    assert spec.params == (
        FloatParam("lr", 1e-4, 3e-2, log=True),
        IntParam("warmup_steps", 0, 400, step=50),
        CategoricalParam("precision", ("fp32", "bf16", "fp16")),
        FloatParam("loss_scale_init", 1024.0, 65536.0, log=True,
                   when=Condition("precision", ("fp16",))),
        FloatParam("weight_decay", 0.0, 0.1),
    )
    assert spec.fixed == {"batch_size": 64}
    assert spec.scheduler.rungs() == (1, 3, 9)
    assert spec.budget.time_s == 8 * 3600
    assert spec.trials.max_concurrent == "auto"
    assert spec.source == str(write(VALID))
    assert spec.raw["trials"]["num"] == 32


def test_defaults_fill_every_optional_section():
    spec = parse_space(MINIMAL)
    assert spec.name == "space"
    assert (spec.search.algorithm, spec.search.seed, spec.search.n_startup_trials) == ("qmc", 0, 10)
    assert (spec.scheduler.type, spec.scheduler.max_t) == ("asha", 10)
    assert (spec.trials.num, spec.trials.max_concurrent, spec.trials.max_failures) == (16, "auto", 2)
    assert (spec.resources.workers, spec.resources.gpus_per_worker) == (1, 0)
    assert spec.budget.time_s is None
    assert spec.storage == "./runs"
    assert (spec.checkpoints.keep, spec.checkpoints.keep_best_trials) == (2, 3)


def test_name_defaults_to_the_file_stem(write):
    text = VALID.replace("name: lm-test\n", "")
    assert load_space(write(text, name="my space.yaml")).name == "my-space"


def test_null_means_default_for_optional_keys_and_no_seed_for_seed():
    spec = parse_space({**MINIMAL, "search": {"seed": None}, "trials": {"max_concurrent": None},
                        "budget": None, "storage": None})
    assert spec.search.seed is None
    assert spec.trials.max_concurrent == "auto"
    assert spec.budget.time_s is None and spec.storage == "./runs"


def test_use_gpu_without_gpus_per_worker_means_one_gpu_each():
    spec = parse_space({**MINIMAL, "resources": {"workers": 4, "use_gpu": True}})
    assert spec.resources.gpus_per_worker == 1
    assert spec.resources.per_trial() == {"CPU": 4, "GPU": 4}


def test_fractional_gpus_below_one_are_allowed_for_one_worker_trials():
    spec = parse_space({**MINIMAL, "resources": {"use_gpu": True, "gpus_per_worker": 0.5}})
    assert spec.resources.gpus_per_worker == 0.5


def test_a_raw_loop_may_ask_several_gpus_per_worker(tmp_path, monkeypatch):
    """Its own code decides what a worker does with its GPUs (the harness uses one)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rawloop.py").write_text("def train_loop(config):\n    pass\n")
    space = tmp_path / "s.yaml"
    space.write_text("trainable: rawloop:train_loop\nobjective: {metric: loss, mode: min}\n"
                     "params: {lr: {type: float, low: 0.001, high: 0.1}}\n"
                     "resources: {workers: 2, use_gpu: true, gpus_per_worker: 2}\n")
    spec = load_space(space)
    assert spec.resources.per_trial()["GPU"] == 4


def test_condition_accepts_a_list_of_values():
    raw = {**MINIMAL, "params": {
        "precision": {"type": "categorical", "choices": ["fp32", "bf16", "fp16"]},
        "scale": {"type": "float", "low": 1, "high": 2, "when": {"precision": ["fp16", "bf16"]}},
        "lr": 0.01,
    }}
    assert parse_space(raw).param("scale").when == Condition("precision", ("fp16", "bf16"))


def test_condition_on_a_fixed_value_is_decided_once(write):
    on = load_space(write(VALID.replace("precision:    {type: categorical, choices: [fp32, bf16, fp16]}",
                                        "precision: fp16")))
    assert on.param("loss_scale_init").when is None
    off = load_space(write(VALID.replace("precision:    {type: categorical, choices: [fp32, bf16, fp16]}",
                                         "precision: bf16")))
    assert "loss_scale_init" not in [p.name for p in off.params]
    assert off.fixed["precision"] == "bf16"


def test_explicit_fixed_type_passes_collections_through():
    raw = {**MINIMAL, "params": {**MINIMAL["params"],
                                 "betas": {"type": "fixed", "value": [0.9, 0.95]}}}
    assert parse_space(raw).fixed == {"betas": [0.9, 0.95]}


def test_default_config_uses_midpoints_and_fixed_values(write):
    config = load_space(write(VALID)).default_config()
    assert config["batch_size"] == 64 and config["precision"] == "fp32"
    assert "loss_scale_init" not in config
    assert config["warmup_steps"] == 200


def test_step_time_attr_reserves_max_steps_not_epochs():
    raw = {**MINIMAL, "scheduler": {"time_attr": "step", "max_t": 1000, "grace_period": 100},
           "params": {**MINIMAL["params"], "epochs": 3}}
    spec = parse_space(raw)
    assert spec.trial_config({"lr": 0.01}) == {"epochs": 3, "lr": 0.01, "max_steps": 1000}
    with pytest.raises(SpaceError) as info:
        parse_space({**raw, "params": {**MINIMAL["params"], "max_steps": 3}})
    assert [(i.path, i.kind) for i in info.value.issues] == [("params.max_steps", "conflict")]


def test_fifo_does_not_check_grace_period_against_max_t():
    spec = parse_space({**MINIMAL, "scheduler": {"type": "fifo", "max_t": 3, "grace_period": 5}})
    assert spec.scheduler.rungs() == ()


def test_parse_space_reports_issues_without_lines():
    with pytest.raises(SpaceError) as info:
        parse_space({**MINIMAL, "trials": {"num": 0}}, source="inline")
    (issue,) = info.value.issues
    assert (issue.path, issue.file, issue.line) == ("trials.num", "inline", None)


def test_parse_space_does_not_modify_its_input():
    raw = {**MINIMAL, "trials": {"num": 4}}
    parse_space(raw, overrides=["trials.num=5"])
    assert raw["trials"] == {"num": 4}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_space_is_valid(path):
    spec = load_space(path)
    assert spec.params and spec.objective.metric == "val_loss"


def test_examples_are_the_three_documented_ones():
    assert {p.name for p in EXAMPLES} >= {"quickstart.yaml", "charlm.yaml", "gpu-ddp.yaml"}


def test_quickstart_is_small_enough_for_a_laptop():
    spec = load_space(EXAMPLES[0].with_name("quickstart.yaml"))
    assert spec.trainable == "digits" and spec.trials.num == 8
    assert spec.resources.workers == 1 and not spec.resources.use_gpu
    assert spec.scheduler.type == "asha" and spec.scheduler.max_t <= 6
    assert {p.name for p in spec.params} == {"lr", "warmup_steps", "precision"}
    assert spec.fixed["batch_size"] == 64


def test_gpu_example_uses_four_gpus_per_trial():
    spec = load_space(EXAMPLES[0].with_name("gpu-ddp.yaml"))
    assert spec.resources.per_trial()["GPU"] == 4
    assert set(spec.param("precision").choices) == {"tf32", "bf16", "fp16"}


def test_summary_shows_ranges_rungs_and_slots(write):
    text = summarize(load_space(write(VALID)))
    assert "float [0.0001, 0.03] log" in text
    assert "int [0, 400] linear, step 50" in text
    assert "only when precision is fp16" in text
    assert "epochs 1, 3, 9" in text
    assert "auto: decided by cluster size at run time" in text
    assert "64 (fixed)" in text
    assert len(text.splitlines()) < 25


def test_summary_shows_explicit_concurrency_and_fifo():
    spec = parse_space({**MINIMAL, "scheduler": {"type": "fifo", "max_t": 5},
                        "trials": {"max_concurrent": 3}})
    text = summarize(spec)
    assert "at most 3 at a time" in text and "FIFO: every trial runs 5 epochs" in text
