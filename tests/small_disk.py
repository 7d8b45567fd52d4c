"""A real small disk for the full-disk tests: a tmpfs of a few MB mounted for one test.

Mounting needs root (CI's machines and these run the tests as root); elsewhere the tests
that need one are skipped with the reason. :func:`fill` leaves a chosen number of bytes
free by writing one file, ``filler``, which :func:`free` deletes again.

Import it as ``from small_disk import small_disk, fill, free`` (pytest puts tests/ on the
path)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

FILLER = "filler"


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int = 8) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` MB at ``path`` while inside; skips the test where none can
    be mounted."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                           str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path, leave: int = 0) -> None:
    """Write ``disk/filler`` until the disk is full, then give back about ``leave`` bytes."""
    chunk = b"\0" * 65536
    fd = os.open(disk / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        try:
            while True:
                os.write(fd, chunk)
        except OSError:
            pass
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))  # shrinking needs no space
    finally:
        os.close(fd)


def free(disk: Path) -> None:
    """Delete the filler."""
    (disk / FILLER).unlink(missing_ok=True)


def free_bytes(disk: Path) -> int:
    stat = os.statvfs(disk)
    return stat.f_bavail * stat.f_frsize
