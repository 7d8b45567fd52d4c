"""A table of malformed spaces: each must fail with the right key path and kind of error,
exit 2 from ``hpsearch validate``, and never show a traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hpsearch.cli import main
from hpsearch.errors import SpaceError
from hpsearch.space import load_space

from .conftest import VALID


def sub(old: str, new: str) -> str:
    """VALID with one exact piece of text replaced (the piece must occur once)."""
    assert VALID.count(old) == 1, old
    return VALID.replace(old, new)


def drop(line_start: str) -> str:
    """VALID without the line starting with ``line_start``."""
    lines = [ln for ln in VALID.splitlines(keepends=True) if not ln.startswith(line_start)]
    assert len(lines) == len(VALID.splitlines()) - 1, line_start
    return "".join(lines)


LR = "lr:           {type: float, low: 1.0e-4, high: 3.0e-2, log: true}"
WARMUP = "warmup_steps: {type: int, low: 0, high: 400, step: 50}"
PRECISION = "precision:    {type: categorical, choices: [fp32, bf16, fp16]}"
LOSS_SCALE = "loss_scale_init: {type: float, low: 1024, high: 65536, log: true, when: {precision: fp16}}"

CASES = [
    # -- the file as a whole -----------------------------------------------------------
    ("empty file", "", "", "empty"),
    ("only comments", "# nothing here\n\n", "", "empty"),
    ("null document", "~\n", "", "empty"),
    ("list at top level", "- trainable: charlm\n- params: {}\n", "", "type"),
    ("scalar at top level", "charlm\n", "", "type"),
    ("syntax error", sub("objective: {metric: val_loss, mode: min}", "objective: {metric: val_loss"), "", "yaml"),
    ("tab indentation", sub("\n  lr:", "\n\tlr:"), "", "yaml"),
    ("two documents", VALID + "---\nname: again\n", "", "yaml"),
    ("not utf-8", VALID.encode() + b"# caf\xe9\n", "", "encoding"),
    ("utf-16", VALID.encode("utf-16"), "", "encoding"),
    ("control character", sub("name: lm-test", "name: lm\x07test"), "", "encoding"),
    ("duplicate key", sub("  batch_size: 64", "  batch_size: 64\n  batch_size: 32"), "params.batch_size", "duplicate_key"),
    ("duplicate section", VALID + "trials: {num: 4}\n", "trials", "duplicate_key"),
    ("python tag", sub("trainable: charlm", "trainable: !!python/object/apply:os.getcwd []"), "trainable", "tag"),
    ("custom tag", sub("storage:   ./runs", "storage: !env RUNS"), "storage", "tag"),
    ("set tag", sub("batch_size: 64", "batch_size: !!set {64}"), "params.batch_size", "tag"),
    ("recursive alias", sub("batch_size: 64", "batch_size: &a [*a]"), "params.batch_size[0]", "yaml"),
    ("unknown section", VALID + "scheduling: {}\n", "scheduling", "unknown_key"),
    # -- required sections -------------------------------------------------------------
    ("no trainable", drop("trainable"), "trainable", "missing"),
    ("no objective", drop("objective"), "objective", "missing"),
    ("no params", VALID.split("params:")[0] + "search: {}\n", "params", "missing"),
    ("params empty", sub("params:\n", "params: {}\nxparams:\n"), "params", "empty"),
    ("params null", VALID.split("params:")[0] + "params:\n", "params", "missing"),
    ("params is a list", VALID.split("params:")[0] + "params: [lr, warmup]\n", "params", "type"),
    # -- name and trainable ------------------------------------------------------------
    ("bad name", sub("name: lm-test", "name: my sweep/1"), "name", "name"),
    ("name is a number", sub("name: lm-test", "name: 12.5"), "name", "type"),
    ("unknown built-in", sub("trainable: charlm", "trainable: charml"), "trainable", "trainable"),
    ("missing module", sub("trainable: charlm", "trainable: no_such_pkg.train:main"), "trainable", "trainable"),
    ("file path as trainable", sub("trainable: charlm", "trainable: train.py:main"), "trainable", "trainable"),
    ("trainable mapping without a command", sub("trainable: charlm", "trainable: {name: charlm}"), "trainable.command", "missing"),
    ("trainable list", sub("trainable: charlm", "trainable: [charlm]"), "trainable", "type"),
    # -- objective ---------------------------------------------------------------------
    ("objective as string", sub("objective: {metric: val_loss, mode: min}", "objective: val_loss"), "objective", "type"),
    ("mode maximize", sub("mode: min}", "mode: maximize}"), "objective.mode", "choice"),
    ("mode boolean", sub("mode: min}", "mode: true}"), "objective.mode", "type"),
    ("no metric", sub("{metric: val_loss, mode: min}", "{mode: min}"), "objective.metric", "missing"),
    ("empty metric", sub("metric: val_loss", "metric: ''"), "objective.metric", "empty"),
    ("metric is a number", sub("metric: val_loss", "metric: 3"), "objective.metric", "type"),
    ("unknown objective key", sub("mode: min}", "mode: min, goal: 0.1}"), "objective.goal", "unknown_key"),
    # -- float parameters --------------------------------------------------------------
    ("log low zero", sub("low: 1.0e-4", "low: 0.0"), "params.lr.low", "range"),
    ("log low negative", sub("low: 1.0e-4", "low: -1.0e-4"), "params.lr.low", "range"),
    ("low above high", sub("high: 3.0e-2", "high: 1.0e-5"), "params.lr.high", "range"),
    ("low equals high", sub("high: 3.0e-2", "high: 1.0e-4"), "params.lr.high", "range"),
    ("misspelt high", sub("high: 3.0e-2", "hihg: 3.0e-2"), "params.lr.hihg", "unknown_key"),
    ("missing high", sub("high: 3.0e-2, ", ""), "params.lr.high", "missing"),
    ("nan low", sub(LR, "lr: {type: float, low: .nan, high: 0.1}"), "params.lr.low", "range"),
    ("inf high", sub(LR, "lr: {type: float, low: 0.1, high: .inf}"), "params.lr.high", "range"),
    ("huge span", sub(LR, "lr: {type: float, low: -1.0e308, high: 1.0e308}"), "params.lr.high", "range"),
    ("low is a string", sub("low: 1.0e-4", "low: '1e-4'"), "params.lr.low", "type"),
    ("low is a boolean", sub("low: 1.0e-4", "low: true"), "params.lr.low", "type"),
    ("low is a mapping", sub("low: 1.0e-4", "low: {value: 1}"), "params.lr.low", "type"),
    ("log is a string", sub("log: true}", "log: 'yes'}"), "params.lr.log", "type"),
    ("step with log", sub("log: true}", "log: true, step: 0.001}"), "params.lr.step", "conflict"),
    ("float step too big", sub("high: 0.1}", "high: 0.1, step: 0.5}"), "params.weight_decay.step", "range"),
    ("float step not a multiple", sub("high: 0.1}", "high: 0.1, step: 0.03}"), "params.weight_decay.step", "range"),
    ("float step zero", sub("high: 0.1}", "high: 0.1, step: 0}"), "params.weight_decay.step", "range"),
    # -- int parameters ----------------------------------------------------------------
    ("int bound is a float", sub("low: 0, high: 400", "low: 0.5, high: 400"), "params.warmup_steps.low", "type"),
    ("int bound is 1.0", sub("low: 0, high: 400", "low: 0, high: 400.0"), "params.warmup_steps.high", "type"),
    ("int bound is a boolean", sub("low: 0, high: 400", "low: false, high: 400"), "params.warmup_steps.low", "type"),
    ("int step too big", sub("step: 50}", "step: 500}"), "params.warmup_steps.step", "range"),
    ("int step not a multiple", sub("step: 50}", "step: 30}"), "params.warmup_steps.step", "range"),
    ("int step negative", sub("step: 50}", "step: -50}"), "params.warmup_steps.step", "range"),
    ("int log from zero", sub(WARMUP, "warmup_steps: {type: int, low: 0, high: 400, log: true}"), "params.warmup_steps.low", "range"),
    ("int huge", sub("high: 400", "high: 100000000000000000000"), "params.warmup_steps.high", "range"),
    # -- categorical parameters --------------------------------------------------------
    ("choices empty", sub("choices: [fp32, bf16, fp16]", "choices: []"), "params.precision.choices", "empty"),
    ("choices missing", sub(", choices: [fp32, bf16, fp16]", ""), "params.precision.choices", "missing"),
    ("choices a string", sub("choices: [fp32, bf16, fp16]", "choices: fp32"), "params.precision.choices", "type"),
    ("choices duplicate", sub("choices: [fp32, bf16, fp16]", "choices: [fp32, bf16, fp32]"), "params.precision.choices[2]", "duplicate"),
    ("unknown precision", sub("choices: [fp32, bf16, fp16]", "choices: [fp32, fp8]"), "params.precision.choices[1]", "choice"),
    ("fixed unknown precision", sub(PRECISION, "precision: int8"), "params.precision", "choice"),
    ("choice is a mapping", sub(PRECISION, "act: {type: categorical, choices: [relu, {gelu: 1}]}"), "params.act.choices[1]", "type"),
    ("1 and true clash", sub(PRECISION, "flag: {type: categorical, choices: [1, true]}"), "params.flag.choices[1]", "duplicate"),
    # -- parameter definitions ---------------------------------------------------------
    ("type missing", sub("{type: float, low: 0.0, high: 0.1}", "{low: 0.0, high: 0.1}"), "params.weight_decay.type", "missing"),
    ("type unknown", sub("{type: float, low: 0.0, high: 0.1}", "{type: loguniform, low: 0.0, high: 0.1}"), "params.weight_decay.type", "choice"),
    ("key of another type", sub("{type: float, low: 0.0, high: 0.1}", "{type: float, low: 0.0, high: 0.1, choices: [1]}"), "params.weight_decay.choices", "unknown_key"),
    ("list value", sub("batch_size: 64", "batch_size: [32, 64]"), "params.batch_size", "type"),
    ("name with dash", sub("batch_size: 64", "batch-size: 64"), "params.batch-size", "name"),
    ("name starts with digit", sub("batch_size: 64", "2nd_moment: 0.99"), "params.2nd_moment", "name"),
    ("name is a number", sub("batch_size: 64", "64: 64"), "params.64", "name"),
    ("fixed nan", sub("batch_size: 64", "batch_size: .nan"), "params.batch_size", "range"),
    ("epochs is set by the scheduler", sub("batch_size: 64", "epochs: 5"), "params.epochs", "conflict"),
    ("param definition is null-typed", sub("{type: float, low: 0.0, high: 0.1}", "{type: 3}"), "params.weight_decay.type", "type"),
    # -- conditions --------------------------------------------------------------------
    ("condition on unknown param", sub("when: {precision: fp16}", "when: {precison: fp16}"), "params.loss_scale_init.when.precison", "condition"),
    ("condition on float", sub("when: {precision: fp16}", "when: {lr: 0.01}"), "params.loss_scale_init.when.lr", "condition"),
    ("condition on later param", sub("when: {precision: fp16}", "when: {weight_decay: 0.1}"), "params.loss_scale_init.when.weight_decay", "condition"),
    ("condition value not a choice", sub("when: {precision: fp16}", "when: {precision: fp61}"), "params.loss_scale_init.when.precision", "condition"),
    ("condition on two params", sub("when: {precision: fp16}", "when: {precision: fp16, lr: 1}"), "params.loss_scale_init.when", "condition"),
    ("condition is a string", sub("when: {precision: fp16}", "when: fp16"), "params.loss_scale_init.when", "type"),
    ("condition empty list", sub("when: {precision: fp16}", "when: {precision: []}"), "params.loss_scale_init.when.precision", "empty"),
    ("condition on itself", sub("when: {precision: fp16}", "when: {loss_scale_init: 1}"), "params.loss_scale_init.when.loss_scale_init", "condition"),
    # -- search ------------------------------------------------------------------------
    ("algorithm unknown", sub("algorithm: tpe", "algorithm: bayes"), "search.algorithm", "choice"),
    ("seed negative", sub("seed: 0", "seed: -1"), "search.seed", "range"),
    ("seed too big", sub("seed: 0", "seed: 99999999999"), "search.seed", "range"),
    ("startup trials a float", sub("n_startup_trials: 8", "n_startup_trials: 8.5"), "search.n_startup_trials", "type"),
    ("search as list", sub("search:    {algorithm: tpe, seed: 0, n_startup_trials: 8}", "search: [tpe]"), "search", "type"),
    # -- scheduler ---------------------------------------------------------------------
    ("grace above max_t", sub("grace_period: 1", "grace_period: 20"), "scheduler.grace_period", "range"),
    ("reduction factor 1", sub("reduction_factor: 3", "reduction_factor: 1"), "scheduler.reduction_factor", "range"),
    ("reduction factor float", sub("reduction_factor: 3", "reduction_factor: 2.5"), "scheduler.reduction_factor", "type"),
    ("scheduler type unknown", sub("type: asha", "type: hyperband"), "scheduler.type", "choice"),
    ("time_attr plural", sub("time_attr: epoch", "time_attr: epochs"), "scheduler.time_attr", "choice"),
    ("max_t zero", sub("max_t: 12", "max_t: 0"), "scheduler.max_t", "range"),
    ("max_t a string", sub("max_t: 12", "max_t: twelve"), "scheduler.max_t", "type"),
    # -- trials ------------------------------------------------------------------------
    ("num zero", sub("num: 32", "num: 0"), "trials.num", "range"),
    ("num boolean", sub("num: 32", "num: true"), "trials.num", "type"),
    ("num mapping", sub("num: 32", "num: {n: 32}"), "trials.num", "type"),
    ("num huge", sub("num: 32", "num: 1000000000000000000000"), "trials.num", "range"),
    ("max_concurrent zero", sub("max_concurrent: auto", "max_concurrent: 0"), "trials.max_concurrent", "range"),
    ("max_concurrent word", sub("max_concurrent: auto", "max_concurrent: all"), "trials.max_concurrent", "choice"),
    ("max_failures negative", sub("max_concurrent: auto}", "max_concurrent: auto, max_failures: -1}"), "trials.max_failures", "range"),
    ("trials as number", sub("trials:    {num: 32, max_concurrent: auto}", "trials: 32"), "trials", "type"),
    # -- resources ---------------------------------------------------------------------
    ("workers zero", sub("workers: 2", "workers: 0"), "resources.workers", "range"),
    ("workers float", sub("workers: 2", "workers: 2.5"), "resources.workers", "type"),
    ("gpus without use_gpu", sub("gpus_per_worker: 0", "gpus_per_worker: 1"), "resources.gpus_per_worker", "conflict"),
    ("use_gpu yes", sub("use_gpu: false", "use_gpu: yes"), "resources.use_gpu", "type"),
    ("use_gpu quoted", sub("use_gpu: false", "use_gpu: 'false'"), "resources.use_gpu", "type"),
    ("cpus zero", sub("cpus_per_worker: 1", "cpus_per_worker: 0"), "resources.cpus_per_worker", "range"),
    ("cpus fractional above 1", sub("cpus_per_worker: 1", "cpus_per_worker: 1.5"), "resources.cpus_per_worker", "range"),
    ("gpus negative", sub("use_gpu: false", "use_gpu: true").replace("gpus_per_worker: 0", "gpus_per_worker: -1"), "resources.gpus_per_worker", "range"),
    # Two NCCL ranks on one GPU fail at their first collective; the harness trains each
    # worker on one GPU, so more would be reserved and never used.
    ("DDP workers sharing a GPU", sub("use_gpu: false", "use_gpu: true").replace("gpus_per_worker: 0", "gpus_per_worker: 0.5"), "resources.gpus_per_worker", "conflict"),
    ("harness worker on 2 GPUs", sub("use_gpu: false", "use_gpu: true").replace("gpus_per_worker: 0", "gpus_per_worker: 2"), "resources.gpus_per_worker", "conflict"),
    # -- budget, storage, checkpoints --------------------------------------------------
    ("budget unparsable", sub("time: 8h", "time: 8 hours"), "budget.time", "format"),
    ("budget sexagesimal", sub("time: 8h", "time: 1:30"), "budget.time", "format"),
    ("budget negative", sub("time: 8h", "time: -60"), "budget.time", "range"),
    ("budget boolean", sub("time: 8h", "time: true"), "budget.time", "type"),
    ("budget as a string", sub("budget:    {time: 8h}", "budget: 8h"), "budget", "type"),
    ("storage a mapping", sub("storage:   ./runs", "storage: {path: ./runs}"), "storage", "type"),
    ("keep zero", sub("keep: 2", "keep: 0"), "checkpoints.keep", "range"),
    ("checkpoints misspelt key", sub("keep_best_trials: 3", "keep_best: 3"), "checkpoints.keep_best", "unknown_key"),
]


@pytest.mark.parametrize(("text", "path", "kind"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_malformed_space_is_rejected_with_path_and_kind(write, text, path, kind):
    file = write(text)
    with pytest.raises(SpaceError) as info:
        load_space(file)
    found = [(i.path, i.kind) for i in info.value.issues]
    assert (path, kind) in found

    result = CliRunner().invoke(main, ["validate", str(file)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output + result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    if path:
        assert f"{path}: " in result.stderr


def test_table_covers_every_section():
    sections = {c[2].split(".")[0].split("[")[0] for c in CASES}
    assert {"", "params", "objective", "search", "scheduler", "trials", "resources",
            "budget", "storage", "checkpoints", "trainable", "name"} <= sections
