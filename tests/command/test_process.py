"""A command's process tree, for real: lines arrive while it runs, and whatever ends it
(its exit, a stop, its trial's process killed outright) leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hpsearch.command.process import Launch, run_command
from hpsearch.errors import TrainableError

#: Prints a line, starts a grandchild that would outlive it, then counts slowly.
SCRIPT = textwrap.dedent(
    """\
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("grandchild", child.pid)
    for i in range(1, 1000):
        print(f"step={i} val_loss={1 / i}")
        time.sleep(0.2)
    """
)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


class Enough(Exception):
    pass


def test_lines_arrive_as_printed_and_a_stop_takes_the_tree_down(script, tmp_path):
    seen: list[tuple[float, str]] = []
    pids: list[int] = []
    t0 = time.monotonic()

    def on_line(line: str) -> None:
        seen.append((time.monotonic() - t0, line))
        if line.startswith("grandchild"):
            pids.append(int(line.split()[1]))
        if line.startswith("step=3 "):
            raise Enough  # as Tune's stop raises out of tune.report

    log = tmp_path / "output.log"
    with pytest.raises(Enough):
        run_command(Launch([sys.executable, str(script)], cwd=str(tmp_path), log=str(log),
                           grace_s=2), on_line)
    # Block-buffered output would have arrived only at exit; this came 0.2 s apart.
    steps = [t for t, line in seen if line.startswith("step=")]
    assert len(steps) == 3 and steps[2] - steps[0] > 0.3
    assert pids and wait_gone(pids, timeout=0.5) == []  # gone when run_command returned
    assert "step=3 val_loss=" in log.read_text()


def test_exit_code_and_last_lines(tmp_path):
    code = "import sys; print('loading'); print('boom', file=sys.stderr); sys.exit(3)"
    finished = run_command(Launch([sys.executable, "-c", code], cwd=str(tmp_path)),
                           lambda line: None)
    assert finished.code == 3
    assert finished.tail_text() == "loading | boom"


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(600)")
    t0 = time.monotonic()
    finished = run_command(Launch([sys.executable, "-c", code], cwd=str(tmp_path), grace_s=1),
                           lambda line: None, should_stop=lambda: time.monotonic() - t0 > 1)
    assert finished.code is None  # stopped, not failed
    assert 1.5 < time.monotonic() - t0 < 8


def test_killing_the_trial_process_outright_takes_the_command_down(script, tmp_path):
    """SIGKILL to the process that runs the command (a Tune actor killed by Ray): the
    supervisor's parent-death signal still takes the command and its grandchild down."""
    trial = textwrap.dedent(
        f"""\
        import sys
        from hpsearch.command.process import Launch, run_command
        def on_line(line):
            print(line, end="", flush=True)
        run_command(Launch([sys.executable, {str(script)!r}], cwd={str(tmp_path)!r},
                           grace_s=1), on_line)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", trial], stdout=subprocess.PIPE, text=True)
    pids = [int(proc.stdout.readline().split()[1])]
    assert proc.stdout.readline().startswith("step=1 ")
    pids += [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                            text=True).stdout.split()]  # the supervisor
    command = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True)
    pids += [int(p) for p in command.stdout.split()]
    assert len(pids) >= 3
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert wait_gone(pids) == []


def test_a_program_that_does_not_exist_is_one_line(tmp_path):
    with pytest.raises(TrainableError, match=r"`pythn` is not a program on PATH"):
        run_command(Launch(["pythn", "train.py"], cwd=str(tmp_path)), lambda line: None)
    with pytest.raises(TrainableError, match=r"`./train.sh` does not exist"):
        run_command(Launch(["./train.sh"], cwd=str(tmp_path)), lambda line: None)
