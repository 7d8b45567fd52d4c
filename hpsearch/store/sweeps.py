"""Whole operations on a sweep directory: open it for a new run or for a resume.

The driver crosses into the store here once per run, and the directory's rules live
here with it: hpsearch never writes into or deletes a directory it did not create, never
replaces a sweep whose driver still runs, and writes the space and the manifest so that a
reader sees the old file or the new one, never a part.

* :func:`check_new`: may a new sweep start at this directory (refuse, before anything
  starts, what must be refused)?
* :func:`create`: the new sweep's directory, space and manifest (replacing the old sweep
  once, with ``--overwrite``, through the fence).
* :func:`open_existing`: the manifest of a sweep to resume, refused when there is none or
  its driver still runs.
* :func:`begin_run` / :func:`end_run`: a run's entry in the manifest.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import yaml

from hpsearch.errors import StorageError, SweepExistsError, SweepNotFoundError
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir, remove_inside, write_atomic
from hpsearch.store.manifest import (
    command_line,
    driver_alive,
    is_ours,
    last_run,
    now_iso,
    read_manifest,
    write_manifest,
)

__all__ = ["abandon", "begin_run", "check_new", "create", "end_run", "open_existing",
           "write_space"]


def check_new(sweep: SweepDir, *, overwrite: bool) -> bool:
    """Whether a sweep already lives at ``sweep`` (and ``overwrite`` may replace it).

    Raises:
        SweepExistsError: The directory exists and is not a sweep hpsearch created, or is
            one and ``overwrite`` is false, or its driver still runs.
    """
    if not os.path.lexists(sweep.path):
        return False
    if not sweep.exists():
        raise SweepExistsError(
            f"{sweep} exists and is not a sweep (it has no manifest.json); hpsearch will not "
            "write into or delete it. Pick another --name or --storage.")
    if not overwrite:
        raise SweepExistsError(
            f"a sweep named {sweep.name!r} already exists in {sweep.storage}. "
            f"Continue it with `hpsearch resume {sweep.name}`, pick another --name, "
            "or pass --overwrite to delete it and start again.")
    manifest = read_manifest(sweep)
    if not is_ours(manifest):
        raise SweepExistsError(
            f"{sweep} holds a manifest.json that hpsearch did not write; it will not delete "
            "that directory. Pick another --name or --storage.")
    _refuse_if_running(sweep, manifest)
    return True


def create(sweep: SweepDir, space: Mapping[str, Any], manifest: Mapping[str, Any], *,
           replace: bool) -> None:
    """Make the new sweep's directory with its space and manifest; with ``replace``,
    delete the sweep there first (checked again: :func:`check_new`).

    Raises:
        StorageError: The directory cannot be created or written.
    """
    if replace and check_new(sweep, overwrite=True):
        remove_inside(sweep.storage, sweep.path)
    try:
        sweep.path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(
            f"cannot create the sweep directory {sweep}: {exc.strerror or exc}. "
            "Choose a writable place with --storage.", errno=exc.errno) from None
    write_space(sweep, space)
    write_manifest(sweep, manifest)


def abandon(sweep: SweepDir) -> None:
    """Take away the directory :func:`create` was making and could not finish (a full
    disk): it holds no trial, and left behind it would block the same command later."""
    remove_inside(sweep.storage, sweep.path)


def write_space(sweep: SweepDir, space: Mapping[str, Any]) -> None:
    """The space as the sweep runs it (after overrides), as ``space.yaml``."""
    text = yaml.safe_dump(dict(space), sort_keys=False, allow_unicode=True)
    write_atomic(sweep.space, lambda tmp: tmp.write_text(text))


def open_existing(sweep: SweepDir) -> dict[str, Any]:
    """The manifest of the sweep to resume at ``sweep``.

    Raises:
        SweepNotFoundError: There is no sweep there.
        SweepExistsError: Its driver still runs.
        DamagedSweepError: The manifest cannot be read.
    """
    if not sweep.exists():
        raise SweepNotFoundError(
            f"no sweep named {sweep.name!r} in {sweep.storage}; `hpsearch ls --storage DIR` "
            "lists the sweeps there")
    manifest = read_manifest(sweep)
    _refuse_if_running(sweep, manifest)
    return manifest


def _refuse_if_running(sweep: SweepDir, manifest: Mapping[str, Any]) -> None:
    if manifest.get("status") == st.SWEEP_RUNNING and driver_alive(manifest):
        pid = (last_run(manifest).get("driver") or {}).get("pid")
        raise SweepExistsError(
            f"sweep {sweep.name!r} is still running (driver pid {pid} on this machine); stop "
            "it with Ctrl-C (or kill that pid) first")


def begin_run(sweep: SweepDir, manifest: dict[str, Any], *, plan: Mapping[str, Any]) -> None:
    """Record that a resumed run starts (its command and plan) in ``manifest``. The
    driver's own entry is added by :func:`~hpsearch.store.manifest.record_driver`."""
    manifest["status"] = st.SWEEP_RUNNING
    manifest["plan"] = dict(plan)
    manifest.setdefault("runs", []).append({"command": command_line(), "started_at": now_iso()})


def end_run(sweep: SweepDir, manifest: dict[str, Any], *, status: str,
            counts: Mapping[str, int]) -> None:
    """Record how a run ended, and write the manifest."""
    manifest.update(status=status, ended_at=now_iso(), counts=dict(counts))
    if manifest.get("runs"):
        manifest["runs"][-1]["ended_at"] = manifest["ended_at"]
    write_manifest(sweep, manifest)
