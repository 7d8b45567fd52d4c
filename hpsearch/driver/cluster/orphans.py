"""A killed driver's local Ray instance, stopped before its sweep resumes."""

from __future__ import annotations

from typing import Any, Mapping

from hpsearch.store import procs
from hpsearch.store.manifest import last_run

__all__ = ["stop_orphaned_local_ray"]


def stop_orphaned_local_ray(manifest: Mapping[str, Any], *, grace_s: float = 10.0) -> list[int]:
    """Stop the local Ray instance of a sweep whose driver was killed.

    The manifest records the driver and the local Ray processes it started, each by pid
    and start time. If that driver is gone and this is the same machine since the same
    boot, the recorded processes that still match exactly, and their descendants (each
    checked the same way), are orphans: SIGTERM, then SIGKILL after ``grace_s``. A pid
    reused by another process, another user's Ray, or anything on another machine is never
    touched. Returns the pids stopped.
    """
    run = last_run(manifest)
    recorded = [p for p in run.get("local_ray") or [] if isinstance(p, Mapping)]
    if not recorded or not procs.same_machine(run) or procs.matches(run.get("driver")):
        return []
    alive = [dict(p) for p in recorded if procs.matches(p)]
    alive += [p for p in procs.descendants([p["pid"] for p in alive])
              if p["pid"] not in {a["pid"] for a in alive}]
    return procs.terminate(alive, grace_s=grace_s)
