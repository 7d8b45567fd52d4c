"""Nothing a command starts outlives its trial: a daemon child in a session of its own that
ignores SIGTERM is killed when the command exits, when the supervisor's front is SIGKILLed
(Ray kills a dying worker's children and process group), and a process outside the tree
that holds the output pipe open does not keep the trial waiting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from hpsearch.command.process import DRAIN_S, Launch, run_command

from .test_process import alive, wait_gone

#: Starts a daemon the way real scripts do (its own session, SIGTERM ignored), prints its
#: pid once it is ready, then reports and (unless told to wait) finishes.
SCRIPT = textwrap.dedent(
    """\
    import os, subprocess, sys, time
    daemon = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys, time; "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
         "time.sleep(600)"], start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert daemon.stdout.readline() == "ready\\n"
    print("daemon", daemon.pid, flush=True)
    print("epoch=1 val_loss=0.5", flush=True)
    if "--wait" in sys.argv:
        time.sleep(600)
    """
)


def _kill(pids: list[int]) -> None:
    for pid in pids:  # a failing test leaves nothing behind either
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _daemon_of(line: str, into: list[int]) -> None:
    if line.startswith("daemon "):
        into.append(int(line.split()[1]))


def test_a_daemon_in_its_own_session_dies_when_the_command_exits(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    daemons: list[int] = []
    try:
        finished = run_command(Launch([sys.executable, "train.py"], cwd=str(tmp_path),
                                      grace_s=0.5), lambda line: _daemon_of(line, daemons))
        assert finished.code == 0
        assert len(daemons) == 1
        assert wait_gone(daemons, timeout=0.5) == []  # gone by the time run_command returned
    finally:
        _kill(daemons)


def test_a_worker_killed_with_its_process_group_leaves_nothing(tmp_path):
    """Ray SIGKILLs a dying worker's process group (and its children): the trial's process
    and the supervisor's front go at once; the guard, in a session of its own, does not,
    and takes the command and its daemon down."""
    (tmp_path / "train.py").write_text(SCRIPT)
    worker = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import sys
        from hpsearch.command.process import Launch, run_command
        run_command(Launch([sys.executable, "train.py", "--wait"], cwd={str(tmp_path)!r},
                           grace_s=0.5), lambda line: print(line, end="", flush=True))
        """)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    daemons: list[int] = []
    try:
        _daemon_of(worker.stdout.readline(), daemons)
        assert len(daemons) == 1 and worker.stdout.readline() == "epoch=1 val_loss=0.5\n"
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        assert wait_gone(daemons, timeout=10) == []
    finally:
        _kill(daemons)
        worker.kill()


def test_an_outside_process_holding_the_pipe_does_not_hold_the_trial(tmp_path):
    """A process outside the command's tree that holds its output pipe (here it opens the
    pipe through /proc) would keep the end of output from coming: the trial reads on for
    DRAIN_S after the command's tree is down, then ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""\
            import os, sys, time
            path = {str(tmp_path / "pid")!r}
            while not os.path.exists(path):
                time.sleep(0.02)
            pipe = open(f"/proc/{{open(path).read().strip()}}/fd/1", "w")
            open(path + ".held", "w").close()
            time.sleep(600)
        """)], start_new_session=True)
    script = textwrap.dedent(f"""\
        import os, time
        with open({str(tmp_path / "pid.tmp")!r}, "w") as f:
            f.write(str(os.getpid()))
        os.rename({str(tmp_path / "pid.tmp")!r}, {str(tmp_path / "pid")!r})
        while not os.path.exists({str(tmp_path / "pid.held")!r}):
            time.sleep(0.02)
        print("epoch=1 val_loss=0.5", flush=True)
    """)
    try:
        lines: list[str] = []
        result: dict = {}
        thread = threading.Thread(target=lambda: result.update(finished=run_command(
            Launch([sys.executable, "-c", script], cwd=str(tmp_path), grace_s=0.5),
            lines.append)), daemon=True)
        thread.start()
        thread.join(timeout=30 + DRAIN_S)
        assert not thread.is_alive(), "the trial waited for a pipe an outside process holds"
        assert result["finished"].code == 0 and lines == ["epoch=1 val_loss=0.5\n"]
        assert alive(holder.pid)  # not ours to kill
    finally:
        holder.kill()
        holder.wait()
