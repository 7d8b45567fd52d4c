"""The sweep directory: every file and folder name in it, and the one fence for deletions.

A sweep lives in ``<storage>/<name>/``::

    space.yaml        the space as run, after overrides
    manifest.json     command, versions, git state, host, seeds, times, status
    trials.parquet    one row per trial                (docs/trial-tables.md)
    history.parquet/  one row per report per trial: a directory of Parquet parts,
                      part-<first>-<end>.parquet (rows [first, end)); a single file in
                      sweeps written before layout 3
    optuna.journal    the Optuna study (Optuna's journal file storage): optuna.load_study /
                      optuna-dashboard. Sweeps started before it keep optuna.db (SQLite).
    report.html       `hpsearch report`: one self-contained page, figures embedded
    report.md         the same report in Markdown; its figures are in report-images/
    tune-<id>/        Ray Tune's experiment state (what `hpsearch resume` restores)
    checkpoints/      one-worker trials' checkpoints: <trial_id>/checkpoint_<step>
    train/            Ray Train runs of multi-worker trials: train-<trial_id>/checkpoint_*

This is the only module that spells those names. Everything else asks a :class:`SweepDir`.

Deleting: hpsearch deletes only what it created, and only through the fence
(:func:`hpsearch.fence.remove_inside`), which refuses any path that does not resolve
strictly inside the directory it is given.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hpsearch.errors import InvalidArgumentError, StorageError
from hpsearch.fence import UnsafePathError, remove_inside

__all__ = ["DEFAULT_STORAGE", "STORAGE_ENV", "SweepDir", "SWEEP_NAME", "TRIAL_ID",
           "UnsafePathError", "check_sweep_name", "check_trial_id", "default_storage", "fsync_dir",
           "remove_inside", "storage_root", "write_atomic"]

#: Where sweeps go when nothing says otherwise.
DEFAULT_STORAGE = "./runs"
#: The environment variable naming the default storage of every command.
STORAGE_ENV = "HPSEARCH_STORAGE"

#: A sweep name: it names a directory directly under the storage root.
SWEEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: A trial id as Ray Tune makes them (8 hex digits), or ``trial`` for `hpsearch trial`.
#: Beside each checkpoint a harness trial writes: the report it was taken at, as JSON.
CHECKPOINT_REPORT = "report.json"

TRIAL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_]{0,63}$")

_TMP_MARK = ".tmp-"
_RUN_NAME = re.compile(r"^tune-\d{8}-\d{6}-[0-9a-f]{4}$")
_PART = re.compile(r"^\.?part-(\d{12})-(\d{12})\.parquet(?:\.tmp-[A-Za-z0-9_]+)?$")


def check_sweep_name(name: str, *, what: str = "sweep name") -> str:
    """Return ``name`` if it may name a sweep directory, else raise a one-line error.

    The rule is the YAML ``name:`` rule: 1-100 letters, digits, ``.``, ``_`` or ``-``,
    starting with a letter or digit. So no ``/``, no ``..``, no absolute path.
    """
    if not isinstance(name, str) or not SWEEP_NAME.match(name) or name in (".", ".."):
        raise UnsafePathError(
            f"{what} {name!r} is not allowed: use 1-100 letters, digits, `.`, `_` or `-`, "
            "starting with a letter or digit (it names a directory directly under the storage)"
        )
    return name


def check_trial_id(trial_id: object) -> str:
    """Return ``trial_id`` if it has a trial id's shape (it builds paths), else raise."""
    if not isinstance(trial_id, str) or not TRIAL_ID.match(trial_id):
        raise UnsafePathError(f"trial id {trial_id!r} does not look like a trial id; "
                              "the trial table may have been edited by hand")
    return trial_id


def storage_root(storage: str | os.PathLike) -> Path:
    """The directory holding sweeps, resolved.

    Raises:
        InvalidArgumentError: An object-store URI, a file, or a system directory.
    """
    from hpsearch.space import storage_problem

    text = os.fspath(storage)
    if "://" in text:
        raise InvalidArgumentError(
            f"--storage must be a filesystem path, not {text!r}: object-store URIs are "
            "not supported yet. On a multi-node cluster use a path every node mounts (NFS)."
        )
    problem = storage_problem(text)
    if problem:
        raise InvalidArgumentError(f"storage {text!r} {problem}; choose another with --storage")
    return Path(text).expanduser().resolve()


def default_storage(explicit: str | os.PathLike | None = None, *,
                    space_storage: str | None = None) -> str:
    """The storage directory a command uses: the first of ``explicit`` (``--storage``),
    ``$HPSEARCH_STORAGE``, ``space_storage`` (a space file's own ``storage:`` key, for
    ``run``), and ``./runs``. An empty value counts as unset.

    The environment comes before the space file because it describes the machine (its
    shared disk), while a space file travels between machines.
    """
    for value in (explicit, os.environ.get(STORAGE_ENV), space_storage):
        if value is not None and os.fspath(value) != "":
            return os.fspath(value)
    return DEFAULT_STORAGE


def write_atomic(target: Path, write: Callable[[Path], None], *, what: str | None = None) -> None:
    """Write ``target`` so that a reader, a crash or a power cut sees the old file or the
    new one, never a part: ``write(tmp)`` fills a temporary file next to it, which is
    flushed to disk, renamed over ``target``, and the directory entry flushed too.

    Raises:
        StorageError: The write failed (full disk, permissions); ``target`` is untouched.
    """
    tmp = SweepDir.temp_for(target)
    try:
        write(tmp)
        _fsync_file(tmp)
        if _KILL_BEFORE_REPLACE and target.suffix == ".parquet":  # fault injection (tests)
            os.kill(os.getpid(), 9)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except OSError as exc:
        try:
            remove_inside(target.parent, tmp)  # our own temporary file, next to the target
        except OSError:
            pass
        raise StorageError(
            f"cannot write {what or target.name} in {target.parent}: {exc.strerror or exc}. "
            "The previous copy is intact; free disk space or fix permissions, then "
            "`hpsearch resume`.", errno=exc.errno
        ) from None


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes an unprivileged writer may still use on the file system of ``path`` (or of
    its nearest existing parent); ``None`` where that cannot be known."""
    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        stat = os.statvfs(here)
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def used_bytes(path: str | os.PathLike) -> int:
    """The bytes of the files under ``path`` (symbolic links not followed)."""
    total = 0
    for directory, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:  # gone while we looked
                pass
    return total


def fmt_bytes(n: float | None) -> str:
    """``1536`` -> ``1.5 KB``: decimal units, as ``df -H`` counts.

    Example:
        >>> fmt_bytes(0), fmt_bytes(1536), fmt_bytes(2.5e9)
        ('0 B', '1.5 KB', '2.5 GB')
    """
    if n is None:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable; a no-op where the
    filesystem cannot."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # not supported here (e.g. some network filesystems): the rename stands
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# Set only by the fault tests (tests/cli/test_faults.py): SIGKILL the driver between
# writing a table's temporary file and renaming it into place.
_KILL_BEFORE_REPLACE = os.environ.get("HPSEARCH_TEST_KILL_BEFORE_TABLE_REPLACE") == "1"


@dataclass(frozen=True)
class SweepDir:
    """One sweep's directory. Every path inside a sweep comes from here.

    Attributes:
        path: The directory, absolute.
    """

    path: Path

    @classmethod
    def at(cls, storage: str | os.PathLike, name: str) -> "SweepDir":
        """The sweep ``name`` under ``storage``; ``name`` must pass :func:`check_sweep_name`."""
        return cls(storage_root(storage) / check_sweep_name(name))

    @classmethod
    def of(cls, path: str | os.PathLike) -> "SweepDir":
        """The sweep directory at ``path`` as it is now (it may have been moved or copied)."""
        return cls(Path(path).expanduser().resolve())

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return os.fspath(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def storage(self) -> Path:
        return self.path.parent

    # --- files -------------------------------------------------------------------------

    @property
    def space(self) -> Path:
        return self.path / "space.yaml"

    @property
    def manifest(self) -> Path:
        return self.path / "manifest.json"

    @property
    def trials(self) -> Path:
        return self.path / "trials.parquet"

    @property
    def tensorboard(self) -> Path:
        """The trackers' TensorBoard event files: a folder per trial (``track:``)."""
        return self.path / "tensorboard"

    @property
    def history(self) -> Path:
        """The history table: a directory of Parquet parts (:meth:`history_part`), or one
        Parquet file in sweeps written before layout 3."""
        return self.path / "history.parquet"

    # --- the history's parts (hpsearch.store.parts) --------------------------------------

    @staticmethod
    def history_part(dataset: Path, first: int, end: int) -> Path:
        """The part of the history dataset ``dataset`` holding rows ``[first, end)``;
        ``[0, 0)`` is the schema part (no rows, every column)."""
        return dataset / f"part-{first:012d}-{end:012d}.parquet"

    @staticmethod
    def history_parts(dataset: Path, *, temporary: bool = False) -> list[tuple[int, int, Path]]:
        """``(first, end, path)`` of the parts in ``dataset``, or with ``temporary`` of the
        hidden temporary files parts are written under (:meth:`temp_for`)."""
        try:
            names = os.listdir(dataset)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for name in names:
            m = _PART.match(name)
            if m and name.startswith(".") == temporary and (_TMP_MARK in name) == temporary:
                found.append((int(m.group(1)), int(m.group(2)), dataset / name))
        return sorted(found, key=lambda p: (p[0], p[1]))

    @staticmethod
    def is_history_dataset(path: Path) -> bool:
        """Whether ``path`` is a history dataset (a directory of parts), not a sweep."""
        return path.is_dir() and bool(SweepDir.history_parts(path))

    @property
    def ray_log(self) -> Path:
        """Ray's own log lines from the driver while the sweep ran (unless ``--verbose``,
        which prints them instead)."""
        return self.path / "ray.log"

    @property
    def optuna(self) -> Path:
        """The Optuna study: a journal file (``JournalFileBackend``), which suits a local
        disk and NFS alike (``docs/trial-tables.md``)."""
        return self.path / "optuna.journal"

    @property
    def optuna_sqlite(self) -> Path:
        """Where sweeps started by older hpsearch versions keep their study (SQLite)."""
        return self.path / "optuna.db"

    @property
    def optuna_sqlite_url(self) -> str:
        """The SQLite study's storage URL, from where the directory is now."""
        return f"sqlite:///{self.optuna_sqlite}"

    @property
    def report_html(self) -> Path:
        """``hpsearch report``'s page: one file, figures embedded, opens offline."""
        return self.path / "report.html"

    @property
    def report_md(self) -> Path:
        """The same report in Markdown."""
        return self.path / "report.md"

    @property
    def report_images(self) -> Path:
        """The figures of :attr:`report_md`, as PNG files it links to."""
        return self.path / "report-images"

    @property
    def tune(self) -> Path:
        """The newest run's Ray Tune experiment directory (:attr:`tune_runs`)."""
        found = self.tune_runs
        return found[-1] if found else self.path / "tune"

    @property
    def tune_runs(self) -> list[Path]:
        """Ray Tune's experiment directories, one per run of the sweep, oldest first.

        Scratch: Tune's own files (``params.json``, ``progress.csv``, ``error.txt`` per
        trial, in ``hpsearch_trial_<trial id>_<Tune's id>/``); hpsearch never reads them
        back. Each run's name is unique (:meth:`new_tune_name`): Ray stages an experiment's
        files under its name and the second it started, so two sweeps that both called it
        ``tune`` and started in the same second shared one staging folder. Sweeps of older
        hpsearch versions have one, ``tune`` or ``tune-<8 hex digits>``.
        """
        found = [p for p in self.path.glob("tune*") if p.is_dir() and
                 (p.name == "tune" or p.name.startswith("tune-"))]
        return sorted(found, key=lambda p: (_RUN_NAME.match(p.name) is not None, p.name))

    @staticmethod
    def new_tune_name() -> str:
        """A fresh name for a run's Tune experiment: ``tune-<date>-<time>-<4 hex digits>``,
        so that the runs' directories sort by when they started."""
        import time
        import uuid

        return f"tune-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def train(self) -> Path:
        return self.path / "train"

    def exists(self) -> bool:
        """Whether a sweep was started here (its manifest exists)."""
        return self.manifest.exists()

    # --- per trial ---------------------------------------------------------------------

    def trial_checkpoints(self, trial_id: str) -> Path:
        """Where a one-worker (in-process) trial keeps its checkpoints."""
        return self.checkpoints / check_trial_id(trial_id)

    @property
    def trial_dirs(self) -> Path:
        """Where command trials keep their folders (:meth:`trial_dir`)."""
        return self.path / "trials"

    def trial_dir(self, trial_id: str) -> Path:
        """A command trial's own folder (``{trial_dir}``): its script's files and its
        output (``output.log``), kept across its restarts."""
        return self.trial_dirs / check_trial_id(trial_id)

    def train_run_name(self, trial_id: str) -> str:
        """The Ray Train run name of a multi-worker trial (a folder under :attr:`train`)."""
        return f"train-{check_trial_id(trial_id)}"

    def checkpoint_dirs(self, trial_id: str) -> list[Path]:
        """A trial's checkpoint directories, whichever way it ran."""
        found = list(self.trial_checkpoints(trial_id).glob("checkpoint_*"))
        found += list((self.train / self.train_run_name(trial_id)).glob("checkpoint_*"))
        return sorted(p for p in found if p.is_dir())

    def checkpointed_reports(self, trial_id: str) -> list[dict]:
        """The reports a trial's checkpoints were taken at (the :data:`CHECKPOINT_REPORT`
        beside each), oldest first by ``step``: what a resume recovers when the driver
        stopped before those reports reached it."""
        found = []
        for directory in self.checkpoint_dirs(trial_id):
            try:
                report = json.loads((directory / CHECKPOINT_REPORT).read_text())
            except (OSError, ValueError):
                continue
            if isinstance(report, dict) and isinstance(report.get("step"), (int, float)):
                found.append(report)
        return sorted(found, key=lambda r: r["step"])

    # --- temporary files of atomic writes ------------------------------------------------

    @staticmethod
    def temp_for(target: Path, tag: str | int | None = None) -> Path:
        """The temporary name a file is written under before it replaces ``target``."""
        tag = os.getpid() if tag is None else tag
        return target.with_name(f".{target.name}{_TMP_MARK}{tag}")

    def temp_files(self, target: Path) -> list[Path]:
        """Temporary copies of ``target`` a killed writer left behind, newest first."""
        found = [p for p in self.path.glob(f".{target.name}{_TMP_MARK}*") if p.is_file()]
        return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)

    def temp_dirs(self, target: Path) -> list[Path]:
        """Temporary directories a killed writer left while creating the dataset
        ``target`` (a new history, or one converted from the single-file layout),
        newest first."""
        found = [p for p in self.path.glob(f".{target.name}{_TMP_MARK}*")
                 if p.is_dir() and not p.is_symlink()]
        return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)

    def remove(self, path: str | os.PathLike) -> bool:
        """Delete ``path`` if it is inside this sweep (the fence: :func:`remove_inside`)."""
        return remove_inside(self.path, path)
