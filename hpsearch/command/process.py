"""One command as a process tree: started under its supervisor, read line by line as it
prints, stopped with everything it started.

:func:`run_command` is all a runner needs: it calls back with each output line as it
comes (the script runs with ``PYTHONUNBUFFERED=1``, so a Python script's prints arrive
when printed, not at its exit), keeps the whole output in a log file, and however it is
left (the command exits, the callback raises because Tune stopped the trial, ``stop()``
says so) the command's tree is gone when it returns.
"""

from __future__ import annotations

import collections
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from hpsearch.command.resume import Resume
from hpsearch.errors import TrainableError

__all__ = ["Finished", "Launch", "check_program", "run_command"]

_SUPERVISOR = str(Path(__file__).with_name("supervise.py"))
#: Seconds the output is still read after the command's supervisor has exited.
DRAIN_S = 2.0
#: Seconds between two asks of ``should_stop``.
POLL_S = 0.5


@dataclass(frozen=True)
class Launch:
    """What to start: the words, where, with which environment, and where the output goes."""

    argv: Sequence[str]
    cwd: str
    env: Mapping[str, str] = field(default_factory=dict)
    log: str | None = None
    grace_s: float = 10.0
    #: Variables of this process's environment the command must not inherit.
    unset: Sequence[str] = ()
    #: The checkpoint ``resume.args`` names, if any.
    resume: Resume | None = None


@dataclass
class Finished:
    """How a command ended: its exit code (``128 + N`` for signal N; ``None`` when it was
    stopped), and its last lines of output."""

    code: int | None
    tail: list[str]

    def tail_text(self, n: int = 8) -> str:
        """The last ``n`` non-empty lines, joined into one line."""
        lines = [ln.strip() for ln in self.tail if ln.strip()][-n:]
        return " | ".join(lines) if lines else "(no output)"


def check_program(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> None:
    """Refuse a command whose program does not exist, in one line.

    Raises:
        TrainableError: ``argv[0]`` is not on ``PATH`` (or, with a ``/``, not a file
            that can be executed from ``cwd``).
    """
    program = argv[0]
    if "/" in program:
        path = os.path.join(cwd, program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return
        what = "is not executable" if os.path.isfile(path) else "does not exist"
        raise TrainableError(f"trainable.command: `{program}` {what} (in {cwd})")
    if shutil.which(program, path=env.get("PATH", os.environ.get("PATH"))) is None:
        raise TrainableError(f"trainable.command: `{program}` is not a program on PATH; "
                             "install it or give its path")


def run_command(launch: Launch, on_line: Callable[[str], None], *,
                should_stop: Callable[[], bool] | None = None, tail: int = 40) -> Finished:
    """Run ``launch`` to its end, calling ``on_line`` with each line of its output.

    Args:
        on_line: Called in this thread, in order; whatever it raises ends the command
            (its tree is stopped) and is raised here.
        should_stop: Polled twice a second; when it says so, the command is stopped and
            :class:`Finished` has ``code`` ``None``.
    """
    env = {k: v for k, v in os.environ.items() if k not in launch.unset}
    env.update({**launch.env, "PYTHONUNBUFFERED": "1"})
    check_program(launch.argv, launch.cwd, env)
    argv = [sys.executable, "-S", _SUPERVISOR, str(launch.grace_s), str(os.getpid()), "--",
            *launch.argv]
    # The supervisor's front is this process's child; it starts the guard that takes the
    # command's tree down in a session of its own (see supervise.py).
    log = open(launch.log, "a", encoding="utf-8", errors="replace") if launch.log else None
    if log is not None:  # each start of the command says what it ran
        log.write(f"# hpsearch {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(launch.argv)}\n")
    last: collections.deque[str] = collections.deque(maxlen=tail)
    proc = subprocess.Popen(argv, cwd=launch.cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", bufsize=1)
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True,
                              name="hpsearch-command-output")
    reader.start()
    stopped = False
    drained_by: float | None = None
    poll_at = time.monotonic() + POLL_S
    try:
        while True:
            if should_stop is not None and time.monotonic() >= poll_at:
                # twice a second, lines or none: a chatty script is stopped as promptly
                poll_at = time.monotonic() + POLL_S
                if should_stop():
                    stopped = True
                    break
            try:
                line = lines.get(timeout=POLL_S)
            except queue.Empty:
                if proc.poll() is not None:
                    # The command's tree is down, yet a process it handed its output to
                    # holds the pipe open (one that escaped the supervisor): read what is
                    # left for a bounded time, never wait for that process to end.
                    drained_by = drained_by or time.monotonic() + DRAIN_S
                    if time.monotonic() > drained_by:
                        break
                continue
            if line is None:
                break
            last.append(line)
            if log is not None:
                log.write(line)
                log.flush()
            on_line(line)
    finally:
        code = _end(proc, launch.grace_s)
        reader.join(timeout=0.1 if drained_by else 5)
        if log is not None:
            log.close()
    return Finished(None if stopped else code, list(last))


def _pump(stream, lines: "queue.Queue[str | None]") -> None:  # noqa: ANN001
    try:
        for line in stream:
            lines.put(line)
    finally:
        lines.put(None)


def _end(proc: subprocess.Popen, grace: float) -> int:
    """The supervisor's exit code (``128 + N`` for signal N); asked to take the tree down
    first if it still runs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace + 10)
        except subprocess.TimeoutExpired:
            proc.kill()
    code = proc.wait()
    return 128 - code if code < 0 else code
