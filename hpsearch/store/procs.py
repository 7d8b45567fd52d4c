"""Processes as a manifest records them: pid, start time and machine.

A pid alone means little: pids are reused within a boot, and a sweep directory on shared
storage is read from other machines. So a process is recorded as ``{pid, start}`` where
``start`` is its start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), next
to the machine's hostname and boot id. hpsearch acts on a recorded process only when all
three still match. Linux only; elsewhere nothing matches and nothing is acted on.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["this_machine", "same_machine", "identify", "matches", "alive", "descendants",
           "terminate"]


def this_machine() -> dict[str, str | None]:
    """Hostname and boot id of this machine."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    return {"hostname": socket.gethostname(), "boot_id": boot}


def same_machine(record: Mapping[str, Any]) -> bool:
    """Whether ``record["machine"]`` is this machine since this boot."""
    machine = record.get("machine")
    return isinstance(machine, Mapping) and machine.get("boot_id") is not None \
        and dict(machine) == this_machine()


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return text.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks after boot, or ``None`` if it is gone."""
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None  # field 22 overall


def identify(pid: int) -> dict[str, int] | None:
    """``{"pid", "start"}`` for a live process, else ``None``."""
    start = start_ticks(pid)
    return None if start is None else {"pid": int(pid), "start": start}


def matches(proc: Any) -> bool:
    """Whether the recorded process ``{"pid", "start"}`` is still the same live process."""
    if not isinstance(proc, Mapping):
        return False
    pid, start = proc.get("pid"), proc.get("start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or not isinstance(start, int):
        return False
    return start_ticks(pid) == start


def alive(pid: int | None) -> bool:
    """Whether any process with this pid exists (prefer :func:`matches`)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def descendants(pids: Iterable[int]) -> list[dict[str, int]]:
    """Every live process below ``pids``, identified (pid and start time)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(int(stat.parent.name))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out: list[dict[str, int]] = []
    seen = set(pids)
    todo = list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
                found = identify(child)
                if found:
                    out.append(found)
    return out


def terminate(procs: Iterable[Mapping[str, int]], *, grace_s: float = 10.0) -> list[int]:
    """SIGTERM each recorded process that still :func:`matches`, then SIGKILL the ones
    still there after ``grace_s``. Returns the pids signalled."""
    targets = [dict(p) for p in procs if matches(p)]
    for proc in targets:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(matches(p) for p in targets):
        time.sleep(0.2)
    for proc in targets:
        _signal(proc, signal.SIGKILL)
    return [p["pid"] for p in targets]


def _signal(proc: Mapping[str, int], sig: int) -> None:
    if not matches(proc):  # checked right before each signal: never a recycled pid
        return
    try:
        os.kill(proc["pid"], sig)
    except (ProcessLookupError, PermissionError):
        pass
