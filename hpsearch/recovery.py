"""What a resumed sweep must put back that Ray Tune does not.

* ASHA's rung records: ``Tuner.restore`` rebuilds the scheduler empty
  (ray-project/ray#30838), so a resumed sweep would let through trials the original run
  would have stopped. :func:`replay_asha_rungs` replays the history table into it.
* Optuna trials left ``RUNNING`` by a driver that died: :func:`fail_orphaned_optuna_trials`
  marks them failed once the resumed sweep has told every trial it resumed.
* A local Ray instance whose driver was killed: :func:`stop_orphaned_local_ray`.
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Mapping

from hpsearch.space.spec import Spec


def replay_asha_rungs(scheduler: Any, history: Iterable[Mapping[str, Any]], spec: Spec) -> int:
    """Feed every recorded report to ``scheduler``'s brackets as ASHA saw it.

    Rung records depend only on each trial's own reports (the value at the first report at
    or past each milestone), not on the order trials arrived in, so replaying the history
    table rebuilds exactly the records the original run had. Returns the number of reports
    replayed.
    """
    metric, time_attr = spec.objective.metric, spec.scheduler.time_attr
    op = 1.0 if spec.objective.mode == "max" else -1.0
    by_trial: dict[str, list[Mapping[str, Any]]] = {}
    for row in history:
        by_trial.setdefault(row["trial_id"], []).append(row)
    bracket = scheduler._brackets[0]  # hpsearch always runs ASHA with one bracket
    replayed = 0
    for trial_id, rows in by_trial.items():
        trial = SimpleNamespace(trial_id=trial_id)
        for row in sorted(rows, key=lambda r: r.get("step") or 0):
            t, value = row.get(time_attr), row.get(metric)
            if _missing(t) or _missing(value):
                continue
            bracket.on_result(trial, t, op * float(value))
            replayed += 1
    return replayed


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fail_orphaned_optuna_trials(storage_url: str, study_name: str) -> int:
    """Mark trials still ``RUNNING`` in the study as ``FAIL``; returns how many.

    Call it when a sweep has finished: every Tune trial has then told Optuna its result,
    so a running Optuna trial can only be one asked by a driver that died before its Tune
    trial was saved. It is replaced by a new suggestion, as a failed trial would be.
    """
    import optuna

    study = optuna.load_study(study_name=study_name, storage=storage_url)
    orphans = [t for t in study.get_trials(deepcopy=False)
               if t.state == optuna.trial.TrialState.RUNNING]
    for trial in orphans:
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    return len(orphans)


def _is_ray_process(pid: int) -> bool:
    """Guards against a recycled pid (a reboot since): only kill what is still Ray."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"ray" in f.read()
    except OSError:
        return False


def _descendants(pids: list[int]) -> list[int]:
    """All processes below ``pids`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def local_ray_processes() -> list[int]:
    """PIDs of the Ray daemons this driver's local instance started, and their agents."""
    try:
        import ray._private.worker as worker
    except ImportError:
        return []
    node = getattr(worker, "_global_node", None)
    if node is None:
        return []
    pids = []
    for infos in node.all_processes.values():
        for info in infos:
            if info.process is not None:
                pids.append(info.process.pid)
    # The raylet's agents (dashboard, runtime env) outlive a killed driver's daemons.
    return pids + [p for p in _descendants(pids) if p not in pids and _is_ray_process(p)]


def this_machine() -> dict[str, str | None]:
    """Hostname and boot id: pids in a manifest mean something only on the same machine
    since the same boot (a resume over shared storage or after a reboot must not act on
    them)."""
    import socket

    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = None
    return {"hostname": socket.gethostname(), "boot_id": boot}


def _same_machine(run: Mapping[str, Any]) -> bool:
    return run.get("machine") == this_machine()


def driver_alive(manifest: Mapping[str, Any]) -> bool:
    """Whether the sweep's last driver is still running, on this machine since this boot."""
    run = (manifest.get("runs") or [{}])[-1]
    pid = run.get("driver_pid")
    return _same_machine(run) and pid != os.getpid() and pid_alive(pid)


def stop_orphaned_local_ray(manifest: Mapping[str, Any], *, grace_s: float = 10.0) -> list[int]:
    """Stop the local Ray instance of a sweep whose driver was killed.

    The manifest records the driver's pid and the pids of the local Ray daemons it
    started. If that driver is gone but its daemons are alive, they are orphans: stop them
    (SIGTERM, then SIGKILL after ``grace_s``). Returns the pids stopped.
    """
    run = (manifest.get("runs") or [{}])[-1]
    local = run.get("local_ray_pids") or []
    if not local or not _same_machine(run) or pid_alive(run.get("driver_pid")):
        return []
    alive = [pid for pid in local if pid_alive(pid) and _is_ray_process(pid)]
    alive += [pid for pid in _descendants(alive) if pid not in alive]  # raylet's agents
    for pid in alive:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in alive):
        time.sleep(0.2)
    for pid in alive:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return alive
