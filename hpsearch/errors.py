"""Errors a user can cause.

Every exception here is caught by the CLI and printed as one clear message (no traceback)
with a non-zero exit code. Anything *not* derived from :class:`HpsearchError` is a bug in
hpsearch and keeps its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "HpsearchError",
    "SpaceError",
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
    """The sweep directory cannot be written (full disk, permissions)."""

    exit_code = 1


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


class SweepStalledError(HpsearchError):
    """Trials waited for resources that never came; the sweep was stopped, tables written."""

    exit_code = 1
