"""A one-worker command trial outside Ray (what `hpsearch trial` runs): reports as they are
printed, resume arguments when the script's checkpoint is there, and one line for a script
that fails or never reports."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from hpsearch.cli import main
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
