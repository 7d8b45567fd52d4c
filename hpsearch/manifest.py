"""``manifest.json``: what ran, where, with which versions, and how it ended."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

MANIFEST_FILE = "manifest.json"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_state(cwd: str | os.PathLike = ".") -> dict[str, Any] | None:
    """Commit and dirty flag of the git work tree at ``cwd``, or ``None`` outside one."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if commit.returncode != 0:
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
    *, name: str, argv: list[str], seed: int | None, cluster: Mapping[str, float],
    address: str | None, objective: Mapping[str, str],
) -> dict[str, Any]:
    return {
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
        "status": "running",
        "runs": [{"command": argv, "started_at": now_iso()}],
    }


def write_manifest(sweep_dir: str | os.PathLike, manifest: Mapping[str, Any]) -> None:
    from hpsearch.errors import StorageError

    path = Path(sweep_dir) / MANIFEST_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageError(
            f"cannot write {path}: {exc.strerror or exc}. The trial tables are intact; free "
            "disk space, then `hpsearch resume`."
        ) from None


def read_manifest(sweep_dir: str | os.PathLike) -> dict[str, Any]:
    return json.loads((Path(sweep_dir) / MANIFEST_FILE).read_text())


def command_line() -> list[str]:
    argv = list(sys.argv)
    if argv and argv[0].endswith(("hpsearch", "__main__.py")):
        argv[0] = "hpsearch"
    return argv
