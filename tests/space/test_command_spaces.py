"""Command trainables in the space file: what validate accepts, what it refuses (one line
each, with its key path and line), and the words a trial runs. Nothing is run here."""

from __future__ import annotations

import math
import os
import re
import textwrap

import pytest
from click.testing import CliRunner

from hpsearch.cli import main
from hpsearch.driver.trials.command_launch import command_argv
from hpsearch.errors import SpaceError
from hpsearch.space import Command, load_space

COMMAND = textwrap.dedent(
    """\
    name: cmd-test
    trainable:
      command: >-
        python train.py --learning_rate={lr} --warmup_iters={warmup_iters}
        --dtype={dtype} --max_iters={max_t} --out_dir={trial_dir}
      metrics: 'step (?P<step>\\d+): train loss (?P<train_loss>[0-9.]+), val loss (?P<val_loss>[0-9.]+)'
      resume: {if_exists: ckpt.pt, args: --init_from=resume}
    objective: {metric: val_loss, mode: min}
    params:
      lr:           {type: float, low: 1.0e-4, high: 3.0e-2, log: true}
      warmup_iters: {type: int, low: 0, high: 100}
      dtype:        {type: categorical, choices: [float32, bfloat16]}
    scheduler: {type: asha, time_attr: step, max_t: 200, grace_period: 40}
    """
)


def sub(old: str, new: str) -> str:
    assert COMMAND.count(old) == 1, old
    return COMMAND.replace(old, new)


def with_scale(dtype_words: str) -> str:
    """COMMAND with ``scale``, sampled only for bfloat16, and ``--dtype={dtype}`` changed
    to ``dtype_words``."""
    dtype = "  dtype:        {type: categorical, choices: [float32, bfloat16]}\n"
    return sub("--dtype={dtype}", dtype_words).replace(
        dtype, dtype + "  scale: {type: float, low: 1, high: 8, when: {dtype: bfloat16}}\n")


@pytest.fixture
def space(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "space.yaml"
        path.write_text(text)
        return str(path)
    return write


def test_a_command_space_is_valid_and_runs_the_words_it_says(space, tmp_path):
    spec = load_space(space(COMMAND))
    assert isinstance(spec.trainable, Command) and spec.command is spec.trainable
    assert spec.command.cwd == str(tmp_path)  # the space file's folder
    assert spec.raw["trainable"]["cwd"] == str(tmp_path)  # a resumed sweep reads it there
    assert spec.command.cwd_in_job is None  # outside the working directory
    config = spec.trial_config({"lr": 0.001, "warmup_iters": 10, "dtype": "bfloat16"})
    trial_dir = tmp_path / "trials" / "abc"
    argv = command_argv(spec, config, trial_id="abc", trial_dir=str(trial_dir))
    assert argv[1:] == ["train.py", "--learning_rate=0.001", "--warmup_iters=10",
                        "--dtype=bfloat16", "--max_iters=200", f"--out_dir={trial_dir}"]
    assert os.path.basename(argv[0]).startswith("python")  # the Python hpsearch runs in
    trial_dir.mkdir(parents=True)
    (trial_dir / "ckpt.pt").write_bytes(b"x")
    assert command_argv(spec, config, trial_id="abc", trial_dir=str(trial_dir))[-1] == \
        "--init_from=resume"


def test_a_cwd_inside_the_working_directory_is_found_again_where_ray_unpacked_it(
        space, tmp_path, monkeypatch):
    from hpsearch.driver.trials.command_launch import command_cwd

    monkeypatch.chdir(tmp_path.parent)
    spec = load_space(space(COMMAND))
    assert spec.command.cwd_in_job == tmp_path.name
    unpacked = tmp_path / "node2"
    (unpacked / tmp_path.name).mkdir(parents=True)
    moved = type(spec.command)(**{**spec.command.__dict__, "cwd": "/no/such/folder"})
    monkeypatch.chdir(unpacked)
    assert command_cwd(moved) == str(unpacked / tmp_path.name)
    assert command_cwd(spec.command) == str(tmp_path)  # where it exists, as written


def test_lists_format_specs_literal_braces_and_a_seed_parameter(space):
    text = textwrap.dedent(
        """\
        trainable:
          command: [./run.sh, '--lr={lr:.2e}', '{{"json": {seed}}}', '--flag={use}']
          cwd: .
          env: {OMP_NUM_THREADS: 2, DEBUG: true}
          stop_grace: 30s
        objective: {metric: loss, mode: min}
        params:
          lr: {type: float, low: 1.0e-4, high: 1.0e-2}
          seed: {type: int, low: 0, high: 3}
          use: true
        """
    )
    spec = load_space(space(text))
    assert spec.command.env == (("OMP_NUM_THREADS", "2"), ("DEBUG", "1"))
    assert spec.command.stop_grace_s == 30
    argv = command_argv(spec, spec.trial_config({"lr": 0.00123, "seed": 2}), trial_id="t1",
                        trial_dir="/d")
    assert argv == ["./run.sh", "--lr=1.23e-03", '{"json": 2}', "--flag=true"]


BAD = [
    ("unknown placeholder", sub("--dtype={dtype}", "--dtype={dtype} --x={lrr}"),
     "trainable.command", "command", "did you mean `{lr}`?"),
    ("unused searched parameter", sub("--dtype={dtype} ", ""), "params.dtype", "command",
     "no placeholder"),
    ("unmatched brace", sub("{trial_dir}", "{trial_dir"), "trainable.command", "command",
     "unmatched brace"),
    ("attribute placeholder", sub("{trial_dir}", "{trial_dir.x}"), "trainable.command",
     "command", "not a placeholder"),
    ("metrics without the objective", sub("(?P<val_loss>", "(?P<vloss>"), "trainable.metrics",
     "command", "`val_loss`"),
    ("metrics without the time attribute", sub("step (?P<step>\\d+)", "step \\d+"),
     "trainable.metrics", "command", "`step`"),
    ("metrics that do not compile", sub("[0-9.]+)'", "[0-9.]+'"), "trainable.metrics", "format",
     "does not compile"),
    ("a pattern with no named group", sub("'step (?P<step>", "['step \\d+', 'step (?P<step>"
                                          ).replace("+)'\n", "+)']\n", 1),
     "trainable.metrics[0]", "command", "no named group"),
    ("resume without args", sub("args: --init_from=resume", "args: null"),
     "trainable.resume.args", "missing", "required"),
    ("resume outside the trial dir", sub("if_exists: ckpt.pt", "if_exists: ../x"),
     "trainable.resume.if_exists", "command", "under {trial_dir}"),
    ("unknown key", sub("  resume:", "  metric: x\n  resume:"), "trainable.metric", "unknown_key",
     "did you mean `metrics`?"),
    ("command not a string", sub("command: >-", "command: 3\n  x: >-"), "trainable.command",
     "type", "string"),
    ("unclosed quote", sub("--out_dir={trial_dir}", "--out_dir='{trial_dir}"),
     "trainable.command", "format", "cannot split"),
    ("cwd missing", sub("  resume:", "  cwd: no/such/dir\n  resume:"), "trainable.cwd",
     "command", "not a directory"),
    ("parameter named like a built-in", sub("  dtype:", "  trial_dir: 3\n  dtype:"),
     "params.trial_dir", "name", "placeholder every command"),
    ("bad stop_grace", sub("  resume:", "  stop_grace: soon\n  resume:"), "trainable.stop_grace",
     "format", ""),
    ("conditional value after its flag", with_scale("--dtype={dtype} --scale {scale}"),
     "trainable.command", "command", "write `--scale={scale}`"),
    ("resume_from outside resume.args", sub("--out_dir={trial_dir}", "--out={resume_from}"),
     "trainable.command", "command", "use it in resume.args"),
    ("metrics and metrics_from", sub("  resume:", "  metrics_from: m.csv\n  resume:"),
     "trainable.metrics_from", "conflict", "not both"),
    ("metrics_from of no known format", sub("  metrics: ", "  metrics_from: [logs/m.txt]\n"
                                            "  x: "),
     "trainable.metrics_from[0].format", "missing", "jsonl, csv, lightning, trainer_state, tensorboard"),
    ("metrics_from with a misspelt format",
     sub("  metrics: ", "  metrics_from: {path: runs, format: tensorbord}\n  x: "),
     "trainable.metrics_from.format", "value", "did you mean `tensorboard`?"),
    ("metrics_from outside the trial dir", sub("  metrics: ", "  metrics_from: /m.csv\n  x: "),
     "trainable.metrics_from.path", "command", "under {trial_dir}"),
]


@pytest.mark.parametrize("text, path, kind, words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_command_space_is_one_line_with_its_path(space, text, path, kind, words):
    file = space(text)
    with pytest.raises(SpaceError) as info:
        load_space(file)
    found = {(i.path, i.kind): i for i in info.value.issues}
    assert (path, kind) in found, list(found)
    issue = found[(path, kind)]
    assert words in issue.message and issue.line is not None
    result = CliRunner().invoke(main, ["validate", file])
    assert result.exit_code == 2 and "Traceback" not in result.output + result.stderr
    assert f"{path}: " in result.stderr


def test_a_conditional_parameters_word_is_there_only_when_the_trial_samples_it(space, tmp_path):
    """``--scale={scale}`` with ``scale`` sampled only for bfloat16: float32 trials run
    without the word (before, their command could not be built: KeyError), and the plan
    at the midpoint shows the command without it."""
    file = space(with_scale("--dtype={dtype} --scale={scale}"))
    spec = load_space(file)
    trial_dir = str(tmp_path / "trials" / "t")
    plain = spec.trial_config({"lr": 0.001, "warmup_iters": 10, "dtype": "float32"})
    scaled = spec.trial_config({"lr": 0.001, "warmup_iters": 10, "dtype": "bfloat16",
                                "scale": 2.0})
    assert not any(w.startswith("--scale") for w in
                   command_argv(spec, plain, trial_id="t", trial_dir=trial_dir))
    assert "--scale=2.0" in command_argv(spec, scaled, trial_id="t", trial_dir=trial_dir)
    result = CliRunner().invoke(main, ["run", file, "--dry-run", "--storage",
                                       str(tmp_path / "runs")])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    # The midpoint: lr at the log-scale middle of [1e-4, 3e-2], warmup_iters 50, dtype the
    # first choice (float32), so scale is not sampled and its word is left out.
    (line,) = [ln.strip() for ln in result.output.splitlines()
               if ln.strip().startswith("command ")]
    found = re.fullmatch(r"command +python train\.py --learning_rate=(\S+) --warmup_iters=50 "
                         r"--dtype=float32 --max_iters=200 --out_dir=<trial_dir>  "
                         r"\(at the midpoint\)", line)
    assert found, line
    assert float(found[1]) == pytest.approx(math.sqrt(1e-4 * 3e-2))


def test_validate_and_the_plan_show_the_command(space):
    file = space(COMMAND)
    result = CliRunner().invoke(main, ["validate", file])
    assert result.exit_code == 0, result.output
    assert "python train.py --learning_rate={lr}" in result.output
    result = CliRunner().invoke(main, ["run", file, "--dry-run", "--storage",
                                       os.path.join(os.path.dirname(file), "runs")])
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if ln.strip().startswith("command"))
    assert "--max_iters=200 --out_dir=<trial_dir>" in line and "--dtype=float32" in line


def test_metrics_from_and_a_resume_glob_fill_resume_from(space, tmp_path):
    text = sub("  metrics: ", "  metrics_from: [out/trainer_state.json, "
               "{path: runs, format: tensorboard}]\n  x: ").replace("  x: '", "  # '")
    text = text.replace("{if_exists: ckpt.pt, args: --init_from=resume}",
                        "{if_exists: 'out/checkpoint-*', args: '--resume_from_checkpoint="
                        "{resume_from}'}")
    spec = load_space(space(text))
    assert [(f.path, f.format) for f in spec.command.metrics_from] == [
        ("out/trainer_state.json", "trainer_state"), ("runs", "tensorboard")]
    config = spec.trial_config({"lr": 0.001, "warmup_iters": 10, "dtype": "float32"})
    trial_dir = tmp_path / "t"
    assert not any("--resume_from" in w for w in command_argv(spec, config, trial_id="t",
                                                              trial_dir=str(trial_dir)))
    for step in (40, 120, 80):
        (trial_dir / "out" / f"checkpoint-{step}").mkdir(parents=True)
    argv = command_argv(spec, config, trial_id="t", trial_dir=str(trial_dir))
    assert argv[-1] == f"--resume_from_checkpoint={trial_dir}/out/checkpoint-120"
