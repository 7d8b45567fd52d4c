"""The processes between a trial and its command: ``python supervise.py GRACE PARENT -- ARGV``.

Two of them. The *front* is the trial's child: Ray may SIGKILL it with the trial's
worker (Ray kills a dying worker's children and its process group), so it holds nothing
but a *guard*, which it starts in a session of its own, out of reach of both. The guard
runs the command in a process group of its own and, whatever ends the trial, takes the
command's whole tree down: the trial's stop (SIGTERM to the front, passed on), the front
dying, whether by the trial's process dying (the kernel's parent-death signal, front then
guard) or by a SIGKILL (the guard's parent-death signal), or the command exiting while
children it started live on. Each time: SIGTERM to the group, ``GRACE`` seconds, SIGKILL,
then the same for any process that left the group, a child that started its own session
included (it is reparented to the guard: the guard is a subreaper). Both exit with the
command's code, ``128 + N`` when a signal N ended it.

Run as a script, not imported: each starts in tens of milliseconds and needs only the
standard library. Linux gives the parent-death signal and the subreaper; elsewhere a
trial's process that is killed outright may leave its command running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class _Stop(Exception):
    pass


def _on_signal(signum: int, frame: object) -> None:
    raise _Stop


def _prctl(option: int, value: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux


def _reap() -> None:
    """Collect every exited child (the command's orphans are ours to reap)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _orphans() -> list[int]:
    """Live processes reparented to this one (Linux: from /proc)."""
    me, found = os.getpid(), []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(name))
    return found


def _alive(group: int) -> bool:
    _reap()
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return bool(_orphans())
    except PermissionError:
        return False
    return True


def _signal_all(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _orphans():
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def take_down(group: int, grace: float) -> None:
    """SIGTERM to the group and the orphans, ``grace`` seconds, then SIGKILL."""
    if not _alive(group):
        return
    _signal_all(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(group):
        time.sleep(0.05)
    while _alive(group):
        _signal_all(group, signal.SIGKILL)
        time.sleep(0.02)


def _watch_parent(parent: int) -> bool:
    """Ask for SIGTERM when the parent dies; ``False`` if it has died already."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    return os.getppid() == parent


def front(args: list[str]) -> int:
    """The trial's child: the guard in a session of its own, SIGTERM passed on to it."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    try:
        if not _watch_parent(int(args[1])):
            return 128 + signal.SIGTERM
        guard = subprocess.Popen([sys.executable, "-S", __file__, "--guard", args[0],
                                  str(os.getpid()), *args[2:]], start_new_session=True)
    except _Stop:
        return 128 + signal.SIGTERM
    while True:
        try:
            code = guard.wait()
            break
        except _Stop:
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, signal.SIG_IGN)
            guard.send_signal(signal.SIGTERM)
    return 128 - code if code < 0 else code


def guard(args: list[str]) -> int:
    """Runs the command and takes its tree down (see the module docstring)."""
    grace, parent, argv = float(args[0]), int(args[1]), args[3:]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if not _watch_parent(parent):  # the front died before the parent-death signal was set
        return 128 + signal.SIGTERM
    try:
        child = subprocess.Popen(argv, start_new_session=True)
    except OSError as exc:
        print(f"hpsearch: cannot run {argv[0]!r}: {exc.strerror}", flush=True)
        return 127
    code: int | None = None
    try:
        code = child.wait()
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        take_down(child.pid, grace)
    if code is None:
        code = child.returncode if child.returncode is not None else -signal.SIGTERM
    return 128 - code if code < 0 else code


def main(args: list[str]) -> int:
    return guard(args[1:]) if args[0] == "--guard" else front(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
