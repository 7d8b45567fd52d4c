"""``hpsearch validate`` and the root command group, as a user runs them."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hpsearch import __version__
from hpsearch.cli import LazyGroup, main
from hpsearch.cli._common import handle_errors
from hpsearch.errors import ClusterError, SpaceError, SpaceIssue

EXAMPLES = Path(__file__).parents[2] / "search_spaces"
CHARLM = str(EXAMPLES / "charlm.yaml")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_valid_space_prints_a_summary_and_exits_0():
    result = run("validate", CHARLM)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "lr               float [0.0003, 0.01] log" in out
    assert "loss_scale_init  float [1024, 65536] log   only when precision is fp16" in out
    assert "rungs at epochs 1, 3" in out
    assert "24, max concurrent auto: decided by cluster size at run time" in out
    assert out.rstrip().endswith("is a valid search space.")
    assert result.stderr == ""


def test_invalid_space_lists_every_problem_on_stderr_and_exits_2(tmp_path):
    bad = tmp_path / "lm.yaml"
    text = Path(CHARLM).read_text()
    bad.write_text(text.replace("low: 3.0e-4", "low: 0.0").replace("num: 24", "num: 0"))
    result = run("validate", str(bad))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "error: 2 problems in the search space:"
    assert lines[1] == f"  params.lr.low: must be > 0 when log is true (got 0.0) [{bad}:13]"
    assert lines[2].startswith("  trials.num: must be >= 1 (got 0)")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("target", "message"),
    [("missing.yaml", "error: cannot read missing.yaml: no such file"),
     (".", "error: . is a directory, not a space file")],
)
def test_unreadable_path_is_one_line_and_exit_2(target, message):
    result = run("validate", target)
    assert result.exit_code == 2
    assert result.stderr.strip() == message


def test_set_applies_before_validation():
    result = run("validate", CHARLM, "--set", "trials.num=4", "--set", "params.precision=bf16",
                 "--set", "lr.high=0.02")
    assert result.exit_code == 0, result.stderr
    assert "trials      4," in result.stdout
    assert "precision     bf16 (fixed)" in result.stdout
    assert "loss_scale_init" not in result.stdout
    assert "float [0.0003, 0.02] log" in result.stdout


def test_set_can_narrow_choices():
    result = run("validate", CHARLM, "--set", "params.precision.choices=[fp32,bf16]")
    assert result.exit_code == 0, result.stderr
    assert "one of fp32, bf16" in result.stdout


@pytest.mark.parametrize(
    ("item", "fragment"),
    [("trials.num", "--set: expected KEY.PATH=VALUE"),
     ("trails.num=3", "did you mean `trials`?"),
     ("trials.num=0", "trials.num: must be >= 1 (got 0) [--set trials.num=0]")],
)
def test_bad_set_is_reported_and_exits_2(item, fragment):
    result = run("validate", CHARLM, "--set", item)
    assert result.exit_code == 2
    assert fragment in result.stderr


def test_version_and_help():
    assert run("--version").stdout.strip() == f"hpsearch, version {__version__}"
    help_text = run("--help").stdout
    assert "validate" in help_text
    assert run("validate", "--help").exit_code == 0


def test_missing_argument_is_a_usage_error():
    result = run("validate")
    assert result.exit_code == 2
    assert "Missing argument" in result.stderr


def test_lazy_group_skips_commands_whose_module_does_not_exist_yet():
    group = LazyGroup(name="x", lazy_commands={
        "validate": "hpsearch.cli.validate:validate",
        "later": "hpsearch.cli.not_written_yet:later",
    })
    ctx = click.Context(group)
    assert group.list_commands(ctx) == ["validate"]
    assert group.get_command(ctx, "later") is None
    assert group.get_command(ctx, "validate").name == "validate"
    result = CliRunner().invoke(group, ["later"])
    assert result.exit_code == 2 and "No such command" in result.stderr


@pytest.mark.parametrize(
    ("exc", "code", "stderr"),
    [
        (ClusterError("no Ray cluster at ray://x"), 2, "error: no Ray cluster at ray://x\n"),
        (SpaceError([SpaceIssue("trials.num", "range", "must be >= 1 (got 0)", "a.yaml", 3)]),
         2, "error: trials.num: must be >= 1 (got 0) [a.yaml:3]\n"),
        (KeyboardInterrupt(), 130, "interrupted\n"),
    ],
)
def test_handle_errors_maps_user_errors_to_exit_codes(exc, code, stderr):
    @click.command()
    @handle_errors
    def boom() -> None:
        raise exc

    result = CliRunner().invoke(boom, [])
    assert result.exit_code == code
    assert result.stderr == stderr


def test_bugs_keep_their_traceback():
    @click.command()
    @handle_errors
    def bug() -> None:
        raise ZeroDivisionError("oops")

    result = CliRunner().invoke(bug, [])
    assert isinstance(result.exception, ZeroDivisionError)
