"""``manifest.json``: what ran, where, with which versions, and how it ended.

The manifest is also hpsearch's claim on a directory: ``created_by`` marks a sweep that
hpsearch made, and only such a directory is ever deleted whole (``run --overwrite``).
Each run (the first, and every resume) appends to ``runs`` the driver process and the
local Ray processes it started, identified by pid *and* start time (:mod:`.procs`).
"""

from __future__ import annotations

import json
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from hpsearch.errors import DamagedSweepError
from hpsearch.store import procs
from hpsearch.store import status as st
from hpsearch.store.layout import SweepDir, write_atomic

__all__ = ["CREATED_BY", "LAYOUT_VERSION", "command_line", "driver_alive", "git_state",
           "is_ours", "new_manifest", "now_iso", "read_manifest", "record_driver",
           "write_manifest"]

#: The marker of a directory hpsearch created.
CREATED_BY = "hpsearch"
#: Version of the sweep-directory layout and of the state Ray Tune pickles in ``tune/``.
#: 2: the package restructure (state pickled by 1 names modules that no longer exist).
#: 3: ``history.parquet`` is a directory of Parquet parts (docs/trial-tables.md); sweeps of
#: layout 2 read and resume, and their history is converted on resume.
LAYOUT_VERSION = 3


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_state(cwd: str | Path = ".") -> dict[str, Any] | None:
    """Commit and dirty flag of the git work tree at ``cwd``, or ``None`` outside one.

    A Ray Job's upload has no ``.git``; ``hpsearch submit`` passes the submitting
    checkout's state as ``HPSEARCH_GIT_COMMIT`` / ``HPSEARCH_GIT_DIRTY``, used when ``cwd``
    is not a work tree."""
    import os

    passed = os.environ.get("HPSEARCH_GIT_COMMIT")
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
            if passed:
                return {"commit": passed, "dirty": os.environ.get("HPSEARCH_GIT_DIRTY") == "1",
                        "from": "hpsearch submit"}
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd, capture_output=True, text=True, timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_manifest(
    *, name: str, argv: list[str] | None = None, seed: int | None,
    cluster: Mapping[str, float], address: str | None, objective: Mapping[str, str],
    plan: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A new sweep's manifest: what made it (``argv``, default this process's command
    line), with which versions, on which cluster, and its first run; ``plan`` as its
    ``plan`` entry when given."""
    argv = command_line() if argv is None else argv
    manifest = {
        "created_by": CREATED_BY,
        "layout": LAYOUT_VERSION,
        "name": name,
        "command": argv,
        "versions": {
            "hpsearch": _version("hpsearch"),
            "ray": _version("ray"),
            "torch": _version("torch"),
            "optuna": _version("optuna"),
            "python": platform.python_version(),
        },
        "git": git_state(),
        "host": {
            "hostname": socket.gethostname(),
            "cpus": cluster.get("CPU"),
            "gpus": cluster.get("GPU", 0),
            "address": address or "local",
        },
        "objective": dict(objective),
        "seed": seed,
        "started_at": now_iso(),
        "ended_at": None,
        "status": st.SWEEP_RUNNING,
        "runs": [{"command": argv, "started_at": now_iso()}],
    }
    if plan is not None:
        manifest["plan"] = dict(plan)
    return manifest


def write_manifest(sweep: SweepDir, manifest: Mapping[str, Any]) -> None:
    """Write the manifest atomically and durably (old or new, never a part)."""
    text = json.dumps(manifest, indent=2, default=str) + "\n"
    write_atomic(sweep.manifest, lambda tmp: tmp.write_text(text))


def read_manifest(sweep: SweepDir) -> dict[str, Any]:
    """The manifest as a dict.

    Raises:
        DamagedSweepError: It is unreadable, not JSON, or not a JSON object.
    """
    try:
        manifest = json.loads(sweep.manifest.read_text())
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DamagedSweepError(
            f"the manifest of sweep {sweep.name!r} cannot be read ({_short(reason)}): "
            f"{sweep.manifest}. Nothing was changed; restore the file or start a new sweep."
        ) from None
    if not isinstance(manifest, dict):
        raise DamagedSweepError(
            f"the manifest of sweep {sweep.name!r} is not a JSON object: {sweep.manifest}. "
            "Nothing was changed; restore the file or start a new sweep."
        )
    return manifest


def is_ours(manifest: Mapping[str, Any]) -> bool:
    """Whether the manifest marks a directory hpsearch created (and may delete whole).

    Manifests of layout 1 predate the marker; they are recognised by their own keys.
    """
    if manifest.get("created_by") == CREATED_BY:
        return True
    legacy = {"name", "command", "versions", "runs", "objective", "status"}
    return legacy <= set(manifest) and "hpsearch" in (manifest.get("versions") or {})


def record_driver(manifest: dict[str, Any], *, local_ray: list[dict[str, int]],
                  simulated_gpu: bool = False) -> None:
    """Note who runs the sweep now, so a later ``resume`` can tell a dead driver's
    orphaned local Ray from a live sweep; ``simulated_gpu``: this run, and so the sweep,
    trained on the CPU on GPUs Ray only reserved (tests)."""
    import os

    run = manifest["runs"][-1]
    run["machine"] = procs.this_machine()
    run["driver"] = procs.identify(os.getpid())
    run["driver_pid"] = os.getpid()  # for people reading the file
    run["local_ray"] = local_ray
    if simulated_gpu:
        manifest["simulated_gpu"] = run["simulated_gpu"] = True


def last_run(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    runs = manifest.get("runs")
    if isinstance(runs, list) and runs and isinstance(runs[-1], Mapping):
        return runs[-1]
    return {}


def driver_alive(manifest: Mapping[str, Any]) -> bool:
    """Whether the sweep's last driver still runs (same machine, boot, pid and start)."""
    import os

    run = last_run(manifest)
    driver = run.get("driver")
    return procs.same_machine(run) and isinstance(driver, Mapping) \
        and driver.get("pid") != os.getpid() and procs.matches(driver)


def driver_died(manifest: Mapping[str, Any]) -> bool:
    """A ``running`` sweep whose driver, recorded on this machine, is gone."""
    return (manifest.get("status") == st.SWEEP_RUNNING and procs.same_machine(last_run(manifest))
            and not driver_alive(manifest))


def command_line() -> list[str]:
    argv = list(sys.argv)
    if argv and argv[0].endswith(("hpsearch", "__main__.py")):
        argv[0] = "hpsearch"
    return argv


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
