"""The one fence every deletion in hpsearch goes through.

hpsearch deletes only what it created: a sweep's own files, its checkpoints, its
temporary files. :func:`remove_inside` is the one function that deletes anything; it
refuses any path that does not resolve strictly inside the directory it is given. It
imports nothing of hpsearch but its errors, so every package can use it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hpsearch.errors import InvalidArgumentError

__all__ = ["UnsafePathError", "remove_inside"]


class UnsafePathError(InvalidArgumentError):
    """A deletion or a name would reach outside the directory hpsearch owns."""


def remove_inside(root: str | os.PathLike, path: str | os.PathLike) -> bool:
    """Delete ``path`` (a file or a directory tree) only if it lies strictly inside ``root``.

    The check is on resolved paths, so ``..`` segments and symbolic links that lead out of
    ``root`` are refused; a symbolic link inside ``root`` is removed as a link, never
    followed. Returns whether something was deleted.

    Raises:
        UnsafePathError: ``path`` is ``root`` itself or outside it. Nothing is deleted.
    """
    root_real = Path(root).resolve()
    target = Path(path)
    if not target.is_absolute():
        target = root_real / target
    # Resolve the parent (following links there), but not the last component: a link
    # inside root is deleted as a link.
    parent_real = target.parent.resolve()
    candidate = parent_real / target.name
    if target.name in ("", ".", "..") or not _strictly_inside(candidate, root_real):
        raise UnsafePathError(f"refusing to delete {os.fspath(path)!r}: it is not inside "
                              f"{os.fspath(root_real)!r}")
    if candidate.is_symlink() or candidate.is_file():
        candidate.unlink(missing_ok=True)
        return True
    if candidate.is_dir():
        shutil.rmtree(candidate)
        return True
    if os.path.lexists(candidate):
        candidate.unlink(missing_ok=True)
        return True
    return False


def _strictly_inside(path: Path, root: Path) -> bool:
    return path != root and root in path.parents
