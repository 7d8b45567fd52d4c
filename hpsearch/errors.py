"""Errors a user can cause.

Every exception here is caught by the CLI and printed as one clear message (no traceback)
with a non-zero exit code. Anything *not* derived from :class:`HpsearchError` is a bug in
hpsearch and keeps its traceback.
"""

from __future__ import annotations

import errno as _errno
import re
from dataclasses import dataclass

__all__ = [
    "DISK_FULL_ERRNOS",
    "DiskFullError",
    "is_disk_full",
    "says_disk_full",
    "HpsearchError",
    "SpaceError",
    "TrackingError",
    "SpaceIssue",
    "TrainableError",
    "ClusterError",
    "SweepExistsError",
    "SweepNotFoundError",
    "StorageError",
    "DamagedSweepError",
    "InvalidArgumentError",
    "TrialFailedError",
    "SweepStalledError",
]


class HpsearchError(Exception):
    """Base class of errors caused by input or environment, not by a bug.

    ``exit_code`` is what the CLI exits with.
    """

    exit_code = 1


@dataclass(frozen=True)
class SpaceIssue:
    """One problem in a space file.

    Attributes:
        path: Dotted key path, e.g. ``params.lr.low`` (``""`` for the whole file).
        kind: Short machine-readable category, e.g. ``unknown_key``, ``range``, ``type``.
        message: What is wrong, stating the rule and the value received.
        file: File name the problem is in, if known.
        line: 1-based line number, if known.
    """

    path: str
    kind: str
    message: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file and self.line:
            where = f" [{self.file}:{self.line}]"
        elif self.file:
            where = f" [{self.file}]"
        prefix = f"{self.path}: " if self.path else ""
        return f"{prefix}{self.message}{where}"


class SpaceError(HpsearchError):
    """A space file (or its overrides) is invalid. Carries *all* issues found."""

    exit_code = 2

    def __init__(self, issues: list[SpaceIssue] | tuple[SpaceIssue, ...]):
        self.issues = tuple(issues)
        n = len(self.issues)
        head = f"{n} problem{'s' if n != 1 else ''} in the search space:"
        super().__init__("\n".join([head, *(f"  {i}" for i in self.issues)]))


class TrainableError(HpsearchError):
    """The trainable cannot be resolved or behaves against its contract."""

    exit_code = 2


class ClusterError(HpsearchError):
    """The Ray cluster is unreachable or cannot fit the requested trials."""

    exit_code = 2


class SweepExistsError(HpsearchError):
    """``run`` was asked to start a sweep whose directory already exists."""

    exit_code = 2


class SweepNotFoundError(HpsearchError):
    """``resume`` / ``read_trials`` found no sweep at the given place."""

    exit_code = 2


class StorageError(HpsearchError):
    """The sweep directory cannot be written (full disk, permissions).

    Attributes:
        errno: The failed write's ``errno``, where there was one.
    """

    exit_code = 1

    def __init__(self, message: str, *, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class DiskFullError(StorageError):
    """The sweep's storage is full (or its quota spent): the sweep stopped as a Ctrl-C
    stops it, and ``hpsearch resume`` continues it once space is freed."""


#: No space left on the device; the disk quota is spent.
DISK_FULL_ERRNOS = frozenset({_errno.ENOSPC, _errno.EDQUOT})

_DISK_FULL_TEXT = re.compile(
    r"\[errno (?:%s)\]|No space left on device|Disk quota exceeded"
    % "|".join(str(n) for n in sorted(DISK_FULL_ERRNOS)), re.IGNORECASE)


def says_disk_full(text: str | None) -> bool:
    """Whether an error's text (a trial's error file, a process's last lines) is a full
    disk's: ``[Errno 28]``, ``No space left on device``, ``Disk quota exceeded``."""
    return bool(text) and _DISK_FULL_TEXT.search(text) is not None


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from, is a full disk's: an errno of
    :data:`DISK_FULL_ERRNOS`, or the text of one (``shutil.Error`` lists the files it
    could not copy; pyarrow says ``[errno 28]``; Ray wraps a worker's error in its own).

    Example:
        >>> is_disk_full(OSError(_errno.ENOSPC, "No space left on device"))
        True
        >>> is_disk_full(PermissionError(_errno.EACCES, "Permission denied"))
        False
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if getattr(exc, "errno", None) in DISK_FULL_ERRNOS or says_disk_full(str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class DamagedSweepError(HpsearchError):
    """A file of a sweep directory cannot be read back (truncated, edited, not ours).

    Nothing is deleted or rewritten when this is raised.
    """

    exit_code = 2


class InvalidArgumentError(HpsearchError):
    """A command-line value that cannot work: a sweep name with ``/``, ``--storage /proc``."""

    exit_code = 2


class TrialFailedError(HpsearchError):
    """The training code failed: under ``hpsearch trial``, the exception's last line and
    where its full traceback was saved; for a command trainable (in a sweep too), its exit
    code and its last lines of output."""

    exit_code = 1


class TrackingError(HpsearchError):
    """A tracker the space asks for (``track:``) cannot be reached or written, before any
    trial runs, or ``hpsearch export`` could not finish."""

    exit_code = 2


class SweepStalledError(HpsearchError):
    """Trials waited for resources that never came; the sweep was stopped, tables written."""

    exit_code = 1
