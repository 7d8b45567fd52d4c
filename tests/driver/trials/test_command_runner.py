"""A one-worker command trial outside Ray (what `hpsearch trial` runs): reports as they are
printed, resume arguments when the script's checkpoint is there, and one line for a script
that fails or never reports."""

from __future__ import annotations

import re
import textwrap

import pytest
from click.testing import CliRunner

from hpsearch.cli import main
from hpsearch.driver.trials.command_launch import command_argv
from hpsearch.driver.trials.resolve import resolve_runner
from hpsearch.errors import TrialFailedError
from hpsearch.space import load_space

SPACE = """\
    trainable:
      command: python train.py --lr={lr} --epochs={max_t} --out={trial_dir}
      resume: {if_exists: done.txt, args: --again}
    objective: {metric: val_loss, mode: min}
    params: {lr: {type: float, low: 0.1, high: 0.3}}
    scheduler: {type: fifo, max_t: 3}
"""

#: Prints each epoch once the test has acknowledged the one before (a file ``acks/<run>-
#: <epoch>`` beside the script): a report that reached the test only at the script's exit
#: would never be acknowledged, and after 30 s the script fails with ``no ack``.
SCRIPT = """\
    import os, sys, time
    args = dict(a.lstrip("-").split("=") for a in sys.argv[1:] if "=" in a)
    run = "again" if "--again" in sys.argv else "fresh"
    acks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "acks")
    print(run)
    for epoch in range(1, int(args["epochs"]) + 1):
        print(f"epoch={epoch} val_loss={float(args['lr']) / epoch}")
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(acks, f"{run}-{epoch}")):
            if time.monotonic() > deadline:
                sys.exit(f"no ack for epoch {epoch}")
            time.sleep(0.02)
    open(os.path.join(args["out"], "done.txt"), "w").close()
"""


@pytest.fixture
def space(tmp_path):
    def write(script: str = SCRIPT) -> str:
        (tmp_path / "train.py").write_text(textwrap.dedent(script))
        (tmp_path / "space.yaml").write_text(textwrap.dedent(SPACE))
        return str(tmp_path / "space.yaml")
    return write


def test_reports_stream_and_a_restart_resumes(space, tmp_path):
    spec = load_space(space())
    runner = resolve_runner(spec)
    (tmp_path / "acks").mkdir()

    def ack(run):  # each report as it arrives lets the script print the next
        return lambda r: (tmp_path / "acks" / f"{run}-{r['epoch']}").touch()

    reports = runner.run_alone(spec.trial_config({"lr": 0.2}), storage=str(tmp_path / "out"),
                               on_report=ack("fresh"))
    assert reports == [{"epoch": e, "val_loss": pytest.approx(0.2 / e)} for e in (1, 2, 3)]
    runner.run_alone(spec.trial_config({"lr": 0.2}), storage=str(tmp_path / "out"),
                     on_report=ack("again"))
    log = (tmp_path / "out" / "trial" / "output.log").read_text()
    headers = [ln for ln in log.splitlines() if ln.startswith("# hpsearch")]
    assert len(headers) == 2 and headers[1].endswith(" --again")
    assert [ln for ln in log.splitlines() if ln in ("fresh", "again")] == ["fresh", "again"]


@pytest.mark.parametrize("script, message", [
    ("print('loading')\n", r"never reported val_loss: read 0 reports from its output.log "
                           r"\(metrics it printed: none\); its last lines: loading; print "
                           r"`val_loss=<value>` lines, or set trainable.metrics"),
    ("import sys\nprint('epoch=1 loss=2')\nsys.exit(1)\n", r"exited with code 1; its last "
                                                           r"lines: epoch=1 loss=2"),
])
def test_a_failing_script_is_one_line(space, tmp_path, script, message):
    spec = load_space(space(script))
    with pytest.raises(TrialFailedError, match=message):
        resolve_runner(spec).run_alone(spec.trial_config({"lr": 0.2}), storage=str(tmp_path))
    result = CliRunner().invoke(main, ["trial", str(tmp_path / "space.yaml")])
    assert result.exit_code == 1 and "Traceback" not in result.output + result.stderr
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


#: Writes ``ckpt-<epoch>.json`` after each epoch; given ``--from=<ckpt>``, starts after it.
CHECKPOINTING = """\
    import json, os, sys
    args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
    start = json.load(open(args["from"]))["epoch"] if "from" in args else 0
    for epoch in range(start + 1, int(args["epochs"]) + 1):
        print(f"epoch={epoch} val_loss={float(args['lr']) / epoch}")
        with open(os.path.join(args["out"], f"ckpt-{epoch}.json"), "w") as f:
            json.dump({"epoch": epoch}, f)
"""


def test_a_checkpoint_cut_short_is_passed_over_at_the_next_attempt(tmp_path):
    """A trial killed while it wrote its newest checkpoint: resumed from it, the script
    fails before its first report, and the next attempt (Tune's retry, `hpsearch resume`)
    resumes from the checkpoint before it; with none left, from the start."""
    (tmp_path / "train.py").write_text(textwrap.dedent(CHECKPOINTING))
    (tmp_path / "space.yaml").write_text(textwrap.dedent(SPACE).replace(
        "{if_exists: done.txt, args: --again}",
        '{if_exists: "ckpt-*.json", args: "--from={resume_from}"}'))
    spec = load_space(str(tmp_path / "space.yaml"))
    runner, config = resolve_runner(spec), spec.trial_config({"lr": 0.2})
    for root, whole, then in (("one-whole", True, "ckpt-1.json"), ("none", False, "the start")):
        trial = tmp_path / root / "trial"
        trial.mkdir(parents=True)
        if whole:
            (trial / "ckpt-1.json").write_text('{"epoch": 1}')
        (trial / "ckpt-2.json").write_text('{"epo')  # the kill came as it was written
        with pytest.raises(TrialFailedError, match=(
                r"exited with code 1 before its first report, resumed from ckpt-2\.json \(a "
                r"checkpoint cut short when its trial was killed fails so, and the trial's "
                rf"next attempt resumes from {re.escape(then)}\); its last lines: .*"
                r"JSONDecodeError")):
            runner.run_alone(config, storage=str(tmp_path / root))
        reports = runner.run_alone(config, storage=str(tmp_path / root))
        assert [r["epoch"] for r in reports] == ([2, 3] if whole else [1, 2, 3]), root
        runs = [ln for ln in (trial / "output.log").read_text().splitlines()
                if ln.startswith("# hpsearch")]
        assert runs[0].endswith(" --from=" + str(trial / "ckpt-2.json"))
        assert runs[1].endswith(" --from=" + str(trial / "ckpt-1.json")) if whole \
            else "--from" not in runs[1]
        # later attempts pass over it too: the newest whole checkpoint is the last written
        assert command_argv(spec, config, trial_id="trial", trial_dir=str(trial))[-1] == \
            "--from=" + str(trial / "ckpt-3.json")
        # ... unless it was written again since: the retry wrote a whole ckpt-2.json
        (trial / "ckpt-3.json").unlink()
        assert command_argv(spec, config, trial_id="trial", trial_dir=str(trial))[-1] == \
            "--from=" + str(trial / "ckpt-2.json")


def test_a_refusal_the_disk_cannot_take_leaves_the_trials_own_error(tmp_path):
    """The list of refused checkpoints cannot be written (here: a folder in its place, as
    a full disk refuses it): the match stays, and the line says the next attempt takes it."""
    from hpsearch.command.resume import REFUSED_FILE, resume_for

    (tmp_path / "ckpt-2.json").write_text('{"epo')
    (tmp_path / REFUSED_FILE).mkdir()
    resume = resume_for(str(tmp_path), "ckpt-*.json")
    assert resume is not None and resume.refuse() == str(tmp_path / "ckpt-2.json")
