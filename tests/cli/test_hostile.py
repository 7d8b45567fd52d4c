"""Hostile and careless input, as a user on a shared machine might type it: each gives one
line (`error: ...`), the documented exit code, no traceback, and loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpsearch.cli import main

REPO = Path(__file__).parents[2]
QUICKSTART = str(REPO / "search_spaces" / "quickstart.yaml")


def cli(*args: str, cwd: Path):
    """Run the CLI in-process (fast); returns (exit code, stdout, stderr)."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), catch_exceptions=True)
    finally:
        os.chdir(old)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback a user would see: a bug
    return result.exit_code, result.stdout, result.stderr


def one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture
def storage(tmp_path):
    """A storage root beside someone else's project whose src/ has a manifest.json."""
    (tmp_path / "runs").mkdir()
    src = tmp_path / "webapp" / "src"
    src.mkdir(parents=True)
    (src / "manifest.json").write_text('{"name": "webapp", "version": "1.0"}')
    (src / "index.js").write_text("keep me")
    return tmp_path


@pytest.mark.parametrize("name", ["/abs/path", "../webapp/src", "a/b", ".."])
def test_run_name_outside_the_storage_is_refused(storage, name):
    code, _, err = cli("run", QUICKSTART, "--name", name, "--overwrite",
                       "--storage", str(storage / "runs"), cwd=storage)
    assert code == 2
    assert "is not allowed" in one_error_line(err)
    assert (storage / "webapp" / "src" / "index.js").read_text() == "keep me"


def test_resume_name_outside_the_storage_is_refused(storage):
    code, _, err = cli("resume", "../webapp/src", "--storage", str(storage / "runs"),
                       cwd=storage)
    assert code == 2 and "is not allowed" in one_error_line(err)


def test_overwrite_never_deletes_a_directory_hpsearch_did_not_create(storage):
    # The storage is the web project itself: "src" holds a manifest.json, but not ours.
    code, _, err = cli("run", QUICKSTART, "--name", "src", "--overwrite",
                       "--storage", str(storage / "webapp"), cwd=storage)
    assert code == 2
    assert "did not write" in one_error_line(err)
    assert (storage / "webapp" / "src" / "index.js").read_text() == "keep me"


def test_trial_output_onto_an_existing_sweep_is_refused_without_overwrite(storage):
    sweep = storage / "runs" / "quickstart"
    sweep.mkdir()
    (sweep / "manifest.json").write_text(json.dumps({"created_by": "hpsearch"}))
    (sweep / "trials.parquet").write_bytes(b"three trials")
    code, _, err = cli("trial", QUICKSTART, "--output", str(sweep), cwd=storage)
    assert code == 2 and "already holds a sweep" in one_error_line(err)
    assert (sweep / "trials.parquet").read_bytes() == b"three trials"


@pytest.mark.parametrize("args, code, fragment", [
    (["--output", "/proc/x"], 2, "system directory /proc"),
    (["--set", "batch_size=100000"], 1, "larger than the training set"),
    (["--set", "resources.use_gpu=true"], 2, "sees no CUDA device"),
])
def test_trial_mistakes_are_one_line(tmp_path, args, code, fragment):
    got, _, err = cli("trial", QUICKSTART, "--set", "scheduler.max_t=1", *args, cwd=tmp_path)
    assert got == code
    assert fragment in one_error_line(err)


def test_an_exploding_learning_rate_ends_diverged_not_with_a_traceback(tmp_path):
    got, out, err = cli("trial", QUICKSTART, "--set", "scheduler.max_t=1", "--set", "lr=1e38",
                        cwd=tmp_path)
    assert got == 3 and "diverged" in out and "Traceback" not in err


SPACE = """\
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: 0.01
"""


@pytest.mark.parametrize("extra, names", [
    ("  lr2: {type: float, low: 0.001, high: 0.1, step: 1.0e-30}\n",
     ["params.lr2.step:", "too small for the range", "s.yaml:5]"]),
    ("budget: {time: '١٢h'}\n", ["budget.time:", "expected a duration", "'١٢h'"]),
    ("storage: /dev/null/x\n", ["storage:", "system directory /dev"]),
    ("storage: /proc\n", ["storage:", "system directory /proc"]),
    ("storage: FILE\n", ["storage:", "it is a file"]),
    ('  choice: {type: categorical, choices: ["\\e[31mred"]}\n  other: "\\e[2J"\n', None),
])
def test_validate_mistakes_are_one_clear_line(tmp_path, extra, names):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    space = tmp_path / "s.yaml"
    space.write_text(textwrap.dedent(SPACE) + extra.replace("FILE", str(a_file)))
    code, out, err = cli("validate", str(space), cwd=tmp_path)
    if names is None:  # valid, but what is printed back is escaped
        assert code == 0 and "\x1b" not in out, out
        return
    assert code == 2, out + err
    line = one_error_line(err)  # one line, naming the key, the rule and the value
    assert all(name in line for name in names), line
    assert "\x1b" not in err


def test_validate_refuses_a_fifo_at_once(tmp_path):
    fifo = tmp_path / "space.yaml"
    os.mkfifo(fifo)
    result = subprocess.run([sys.executable, "-m", "hpsearch", "validate", str(fifo)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "not a regular file" in one_error_line(result.stderr)


@pytest.mark.parametrize("body", [
    "import os\nos._exit(0)\n",
    "open('imported.txt', 'w').write('x')\n",
    "while True:\n    pass\n",
])
def test_validate_never_runs_the_trainable_module(tmp_path, body):
    (tmp_path / "evil.py").write_text(body + "def train(config):\n    pass\n")
    space = tmp_path / "s.yaml"
    space.write_text(textwrap.dedent(SPACE).replace("trainable: digits",
                                                    "trainable: evil:train"))
    result = subprocess.run([sys.executable, "-m", "hpsearch", "validate", str(space)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "is a valid search space" in result.stdout
    assert not (tmp_path / "imported.txt").exists()


def test_resume_of_a_sweep_with_a_corrupt_manifest_is_one_line_and_deletes_nothing(storage):
    sweep = storage / "runs" / "s"
    sweep.mkdir()
    (sweep / "manifest.json").write_text("[1, 2")
    (sweep / ".trials.parquet.tmp-1").write_bytes(b"x")
    code, _, err = cli("resume", "s", "--storage", str(storage / "runs"), cwd=storage)
    assert code == 2 and "cannot be read" in one_error_line(err)
    assert (sweep / ".trials.parquet.tmp-1").exists()


def journal_with_trials(sweep, name: str, n: int) -> None:
    """A real Optuna journal study named ``name`` holding ``n`` finished trials."""
    import optuna

    from hpsearch.driver.record.study import SweepJournal

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=optuna.storages.JournalStorage(
        SweepJournal(str(sweep.optuna))))
    for i in range(n):
        study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=float(i)))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "short", "missing"])
def test_a_damaged_study_is_found_before_a_resume_changes_anything(tmp_path, damage):
    from hpsearch.driver.record.study import check_sweep_study
    from hpsearch.errors import DamagedSweepError
    from hpsearch.store.layout import SweepDir

    sweep = SweepDir(tmp_path / "s")
    sweep.path.mkdir()
    journal_with_trials(sweep, "s", 3)
    check_sweep_study(sweep, [0, 1, 2])  # whole: fine
    data = sweep.optuna.read_bytes()
    if damage == "garbage":
        sweep.optuna.write_text("garbage{{{\n")
    elif damage == "truncated":  # cut inside the first record: no study left
        sweep.optuna.write_bytes(data[:60])
    elif damage == "short":  # whole records, but fewer trials than the table links
        sweep.optuna.write_bytes(b"".join(data.splitlines(keepends=True)[:3]))
    else:
        sweep.optuna.unlink()
    before = sweep.optuna.read_bytes() if sweep.optuna.exists() else None
    with pytest.raises(DamagedSweepError, match=r"optuna\.journal of sweep 's' cannot be used"):
        check_sweep_study(sweep, [0, 1, 2])
    assert (sweep.optuna.read_bytes() if sweep.optuna.exists() else None) == before


def test_resume_of_a_sweep_whose_study_is_garbled_is_one_line_and_changes_nothing(storage):
    from synthetic_sweep import make_sweep

    sweep = make_sweep(storage / "runs", "s", n=4)
    sweep.optuna.write_text("garbage{{{\n")
    before = {p: p.read_bytes() for p in sweep.path.rglob("*") if p.is_file()}
    code, _, err = cli("resume", "s", "--trials", "6", "--storage", str(storage / "runs"),
                       cwd=storage)
    line = one_error_line(err)
    assert code == 2 and "optuna.journal of sweep 's' cannot be used" in line
    assert "--warm-start s" in line
    assert {p: p.read_bytes() for p in sweep.path.rglob("*") if p.is_file()} == before
