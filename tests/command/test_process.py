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

#: Starts a grandchild that would outlive it, then prints a step at a time, each once the
#: test has acknowledged the one before (a file ``acks/<step>``): a line that reached the
#: test only at the script's exit would never be acknowledged, and after 30 s the script
#: gives up with ``no ack``.
SCRIPT = textwrap.dedent(
    """\
    import os, subprocess, sys, time
    acks = sys.argv[1]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("grandchild", child.pid)
    for i in range(1, 1000):
        print(f"step={i} val_loss={1 / i}")
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(acks, str(i))):
            if time.monotonic() > deadline:
                print(f"no ack for step {i}")
                sys.exit(1)
            time.sleep(0.02)
    """
)

#: Prints its own, its supervisor's and a grandchild's pids, then waits without a word
#: (a process that prints would die of the closed pipe once its trial is gone, whatever
#: the supervisor does).
SILENT = textwrap.dedent(
    """\
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("pids", os.getpid(), os.getppid(), child.pid, flush=True)
    time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float = 30) -> list[int]:
    """The ``pids`` still alive after ``timeout`` s (a deadline for a hang, not a measure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_left(pids: list[int]) -> None:
    """SIGKILL whatever of ``pids`` a failing test left running."""
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


class Enough(Exception):
    pass


def test_lines_arrive_as_printed_and_a_stop_takes_the_tree_down(script, tmp_path):
    seen: list[str] = []
    pids: list[int] = []
    acks = tmp_path / "acks"
    acks.mkdir()

    def on_line(line: str) -> None:
        seen.append(line)
        if line.startswith("grandchild"):
            pids.append(int(line.split()[1]))
        if line.startswith("step="):
            step = line.split()[0].split("=")[1]
            (acks / step).touch()  # the script prints the next step only after this
            if step == "3":
                raise Enough  # as Tune's stop raises out of tune.report

    log = tmp_path / "output.log"
    try:
        with pytest.raises(Enough):
            run_command(Launch([sys.executable, str(script), str(acks)], cwd=str(tmp_path),
                               log=str(log), grace_s=2), on_line)
        # Each step was read while the script waited for it to be: none came at the exit.
        assert [ln.split()[0] for ln in seen if ln.startswith("step=")] == [
            "step=1", "step=2", "step=3"], seen
        assert not [ln for ln in seen if ln.startswith("no ack")], seen
        assert len(pids) == 1 and [p for p in pids if alive(p)] == []  # gone on return
        assert "step=3 val_loss=" in log.read_text()
    finally:
        kill_left(pids)


def test_a_stop_is_heard_while_the_script_keeps_printing(tmp_path):
    """``should_stop`` is asked twice a second even when lines never pause (a progress
    bar): Tune's stop of a trial, or its quiet limit, must not wait for the script to fall
    silent. The script prints every 20 ms for 30 s, and is stopped at its first ask."""
    code = ("import time\nfor i in range(1500):\n    print('tick', i, flush=True)\n"
            "    time.sleep(0.02)\n")
    asked: list[float] = []

    def should_stop() -> bool:
        asked.append(time.monotonic())
        return True

    started = time.monotonic()
    finished = run_command(Launch([sys.executable, "-c", code], cwd=str(tmp_path), grace_s=2),
                           lambda line: None, should_stop=should_stop)
    assert finished.code is None and len(asked) == 1  # stopped, at the first ask
    assert asked[0] - started < 5, "asked only once the script had stopped printing"


def test_exit_code_and_last_lines(tmp_path):
    code = "import sys; print('loading'); print('boom', file=sys.stderr); sys.exit(3)"
    finished = run_command(Launch([sys.executable, "-c", code], cwd=str(tmp_path)),
                           lambda line: None)
    assert finished.code == 3
    assert finished.tail_text() == "loading | boom"


def test_a_child_that_survives_sigterm_is_killed_after_the_grace(tmp_path):
    """Stopped, the command gets SIGTERM, the grace to end, and then SIGKILL: a child that
    handles SIGTERM and runs on is dead when ``run_command`` returns, and it ran after
    the SIGTERM (the grace came before the SIGKILL)."""
    marks = tmp_path / "marks"
    code = textwrap.dedent(
        f"""\
        import os, signal, time
        def on_term(signum, frame):
            with open({str(marks)!r}, "a") as f:
                f.write("term\\n")
        signal.signal(signal.SIGTERM, on_term)
        print("ready", os.getpid(), flush=True)
        wrote = False
        while True:
            time.sleep(0.05)
            if not wrote and os.path.exists({str(marks)!r}):
                with open({str(marks)!r}, "a") as f:
                    f.write("after term\\n")
                wrote = True
        """
    )
    pids: list[int] = []

    def on_line(line: str) -> None:
        if line.startswith("ready"):
            pids.append(int(line.split()[1]))

    try:
        finished = run_command(Launch([sys.executable, "-c", code], cwd=str(tmp_path),
                                      grace_s=3), on_line, should_stop=lambda: bool(pids))
        assert finished.code is None  # stopped, not failed
        assert len(pids) == 1 and not alive(pids[0])  # SIGKILLed before run_command returned
        lines = marks.read_text().splitlines()  # (SIGTERM may come more than once)
        assert lines[0] == "term" and "after term" in lines
    finally:
        kill_left(pids)


def test_killing_the_trial_process_outright_takes_the_command_down(tmp_path):
    """SIGKILL to the process that runs the command (a Tune actor killed by Ray): the
    supervisor's parent-death signal takes it down, and it the command and the command's
    child. The command prints nothing meanwhile, so no closed pipe kills it instead."""
    silent = tmp_path / "silent.py"
    silent.write_text(SILENT)
    trial = textwrap.dedent(
        f"""\
        import sys
        from hpsearch.command.process import Launch, run_command
        def on_line(line):
            print(line, end="", flush=True)
        run_command(Launch([sys.executable, {str(silent)!r}], cwd={str(tmp_path)!r},
                           grace_s=1), on_line)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", trial], stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        words = proc.stdout.readline().split()
        assert words[0] == "pids", words
        pids = [int(p) for p in words[1:]]  # the command, its supervisor, its child
        assert len(set(pids)) == 3 and all(alive(p) for p in pids)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        left = wait_gone(pids)
        assert left == [], [open(f"/proc/{p}/cmdline").read() for p in left if alive(p)]
    finally:
        proc.kill()
        kill_left(pids)


def test_a_program_that_does_not_exist_is_one_line(tmp_path):
    with pytest.raises(TrainableError, match=r"`pythn` is not a program on PATH"):
        run_command(Launch(["pythn", "train.py"], cwd=str(tmp_path)), lambda line: None)
    with pytest.raises(TrainableError, match=r"`./train.sh` does not exist"):
        run_command(Launch(["./train.sh"], cwd=str(tmp_path)), lambda line: None)
