"""Trial tables: Tune results -> ``trials.parquet`` and ``history.parquet``.

:class:`TrialRecords` holds plain per-trial state keyed by trial id. The Tune callback
:class:`hpsearch.callbacks.TablesCallback` feeds it in the sweep driver and rewrites both
tables atomically (write a temporary file, then ``os.replace``) at a bounded interval and
whenever a trial ends, so a notebook can read them at any moment of a sweep and a
finished trial's row is on disk as soon as it ends.

Readers (:func:`read_trials`, :func:`read_history`) import only pandas. The schema is
documented in ``docs/trial-tables.md``.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from hpsearch.errors import StorageError, SweepNotFoundError
from hpsearch.space.spec import TRIAL_COLUMNS, Spec

# Set only by the fault tests (tests/cli/test_faults.py): SIGKILL the driver between
# writing a table's temporary file and renaming it into place.
_KILL_BEFORE_REPLACE = os.environ.get("HPSEARCH_TEST_KILL_BEFORE_TABLE_REPLACE") == "1"

TRIALS_FILE = "trials.parquet"
HISTORY_FILE = "history.parquet"

# Statuses a trial row can have (docs/trial-tables.md).
STATUSES = ("completed", "stopped_by_asha", "stopped", "diverged", "unsupported_precision",
            "failed", "running", "pending")
ENDED = frozenset(STATUSES) - {"running", "pending"}

# Result keys that are Tune bookkeeping rather than training metrics.
TUNE_KEYS = frozenset(
    {
        "config", "date", "done", "experiment_tag", "hostname", "iterations_since_restore",
        "node_ip", "pid", "should_checkpoint", "time_since_restore", "time_this_iter_s",
        "timestamp", "timesteps_since_restore", "timesteps_total", "episodes_total",
        "trial_id", "checkpoint_dir_name", "checkpoint_path", "checkpoint",
    }
)


def history_row(trial_id: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """One history row: ``trial_id``, ``step``, ``epoch``, ``time_total_s`` and every
    scalar metric of the report."""
    row: dict[str, Any] = {"trial_id": trial_id}
    for key, value in result.items():
        if key in TUNE_KEYS or not _is_scalar(value):
            continue
        row[key] = value
    row.setdefault("step", result.get("training_iteration"))
    row.setdefault("epoch", None)
    return row


def final_status(
    last: Mapping[str, Any] | None,
    *,
    spec: Spec,
    errored: bool = False,
    finished: bool = True,
    budget_expired: bool = False,
) -> str:
    """Status of a trial from its last report and how it ended."""
    if errored:
        return "failed"
    if not finished:
        return "running" if last else "pending"
    if not last:  # ended before its first report (budget, stop of the whole sweep)
        return "stopped"
    reported = (last or {}).get("status")
    if reported in ("diverged", "unsupported_precision", "completed"):
        return reported
    reached = (last or {}).get(spec.scheduler.time_attr)
    if reached is not None and float(reached) >= spec.scheduler.max_t:
        return "completed"
    if budget_expired:
        return "stopped"
    return "stopped_by_asha" if spec.scheduler.type == "asha" else "completed"


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _is_better(value: float, best: float | None, mode: str) -> bool:
    if value is None or not math.isfinite(value):
        return False
    return best is None or (value < best if mode == "min" else value > best)


class TrialRecords:
    """Plain per-trial state and history rows, independent of Ray (tested directly)."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.trials: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []
        self.version = 0  # bumped on every change, so writers know what is unsaved
        self._frozen: set[str] = set()  # ended rows a resumed Tune replays
        self._seen_steps: set[tuple[str, Any]] = set()

    def start(self, trial_id: str, params: Mapping[str, Any]) -> None:
        row = self.trials.get(trial_id)
        if row is not None and row.get("status") in ENDED:
            # Ended before a crash that Tune's saved state did not see: Tune starts it
            # again, the trial replays its recorded result (trial.py), and its row stays.
            self._frozen.add(trial_id)
            return
        self.version += 1
        row = self.trials.setdefault(trial_id, {"trial_id": trial_id, "status": "running"})
        row.update({p.name: params.get(p.name) for p in self.spec.params})
        row["status"] = "running"
        row.setdefault("started_at", time.time())

    def result(self, trial_id: str, result: Mapping[str, Any]) -> None:
        if trial_id in self._frozen:
            return
        self.version += 1
        row = self.trials.setdefault(trial_id, {"trial_id": trial_id, "status": "running"})
        hist = history_row(trial_id, result)
        key = (trial_id, hist.get("step"))
        if key not in self._seen_steps:  # a restarted trial may repeat a report
            self._seen_steps.add(key)
            self.history.append(hist)
        metric, mode = self.spec.objective.metric, self.spec.objective.mode
        value = result.get(metric)
        row["last"] = hist
        row["final_value"] = value
        if _is_better(value, row.get("best_value"), mode):
            row["best_value"] = value
            row["best_step"] = hist.get("step")
            row["best_epoch"] = hist.get("epoch")
        row["steps"] = hist.get("step")
        row["epochs"] = hist.get("epoch")
        row["wall_s"] = result.get("time_total_s")
        if result.get("precision") is not None:
            row["precision_used"] = result.get("precision")
        if result.get("checkpoint_path"):
            row["checkpoint"] = result["checkpoint_path"]

    def end(
        self,
        trial_id: str,
        *,
        errored: bool = False,
        error: str | None = None,
        checkpoint: str | None = None,
        budget_expired: bool = False,
    ) -> None:
        if trial_id in self._frozen:
            return
        self.version += 1
        row = self.trials.setdefault(trial_id, {"trial_id": trial_id})
        row["status"] = final_status(
            row.get("last"), spec=self.spec, errored=errored, budget_expired=budget_expired
        )
        row["ended_at"] = time.time()
        if error:
            row["error"] = error
        if checkpoint and not row.get("checkpoint"):
            row["checkpoint"] = checkpoint

    def load(self, trials: Iterable[Mapping[str, Any]], history: Iterable[Mapping[str, Any]]):
        """Seed from tables written earlier (resume)."""
        self.version += 1
        for row in trials:
            self.trials[row["trial_id"]] = {k: v for k, v in row.items() if not _is_nan(v)}
        for row in history:
            row = {k: v for k, v in row.items() if not _is_nan(v)}
            key = (row["trial_id"], row.get("step"))
            if key not in self._seen_steps:
                self._seen_steps.add(key)
                self.history.append(row)
        for tid, row in self.trials.items():
            rows = [h for h in self.history if h["trial_id"] == tid]
            if rows:
                row["last"] = rows[-1]

    def stop_unfinished(self) -> list[str]:
        """End every trial still running as ``stopped``: the sweep ended around it (time
        budget, all-failed stop) and Tune calls no callback for those."""
        unfinished = [tid for tid, row in self.trials.items()
                      if row.get("status") in ("running", "pending")]
        for tid in unfinished:
            self.end(tid, budget_expired=True)
        return unfinished

    def forget_unfinished_except(self, known: set[str]) -> list[str]:
        """Drop unfinished trials Tune does not know (resume): a driver that died after
        starting them but before saving Tune's state takes them with it. Returns their ids."""
        lost = [tid for tid, row in self.trials.items()
                if tid not in known and row.get("status") in ("running", "pending")]
        if lost:
            self.version += 1
            for tid in lost:
                del self.trials[tid]
            self.history = [h for h in self.history if h["trial_id"] not in lost]
            self._seen_steps = {k for k in self._seen_steps if k[0] not in lost}
        return lost

    # --- tables ----------------------------------------------------------------------

    def trials_frame(self):
        import pandas as pd

        res = self.spec.resources
        params = [p.name for p in self.spec.params if p.name not in TRIAL_COLUMNS]
        columns = ["trial_id", "status", *params, *TRIAL_COLUMNS[2:]]
        rows = []
        for row in self.trials.values():
            out = {c: row.get(c) for c in columns}
            wall = row.get("wall_s")
            out["worker_s"] = wall * res.workers if wall is not None else None
            out["gpu_s"] = (
                wall * res.workers * (res.gpus_per_worker or 1)
                if wall is not None and res.use_gpu
                else 0.0 if wall is not None else None
            )
            rows.append(out)
        df = pd.DataFrame(rows, columns=columns)
        for col in ("started_at", "ended_at"):
            df[col] = pd.to_datetime(df[col], unit="s", utc=True)
        for col in ("final_value", "best_value", "wall_s", "worker_s", "gpu_s"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
        for col in ("best_step", "steps"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
        for col in ("best_epoch", "epochs"):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
        # Fixed types, so a column that is empty in this sweep (no error yet, a conditional
        # parameter never sampled) has the same Arrow type as in every other sweep.
        for col in ("trial_id", "status", "precision_used", "checkpoint", "error"):
            df[col] = df[col].astype("string")
        for p in self.spec.params:
            if p.name not in params:
                continue
            if p.type == "float":
                df[p.name] = pd.to_numeric(df[p.name], errors="coerce").astype("float64")
            elif p.type == "int":
                df[p.name] = pd.to_numeric(df[p.name], errors="coerce").astype("Int64")
            elif all(isinstance(c, str) for c in p.choices):
                df[p.name] = df[p.name].astype("string")
        return _arrow_safe(df)

    def history_frame(self):
        import pandas as pd

        df = pd.DataFrame(self.history)
        if df.empty:
            df = pd.DataFrame(columns=["trial_id", "step", "epoch", "time_total_s"])
        lead = [c for c in ("trial_id", "step", "epoch", "time_total_s") if c in df]
        df = df[lead + sorted(c for c in df.columns if c not in lead)]
        if "step" in df:
            df["step"] = pd.to_numeric(df["step"], errors="coerce").astype("Int64")
        if "epoch" in df:
            df["epoch"] = pd.to_numeric(df["epoch"], errors="coerce").astype("float64")
        return _arrow_safe(df)


def _is_nan(value: Any) -> bool:
    try:
        return value is None or (isinstance(value, float) and math.isnan(value))
    except TypeError:
        return False


def _arrow_safe(df):
    """Columns mixing types (e.g. categorical choices ``[32, auto]``) become strings, so
    the Parquet schema stays one type per column."""
    for col in df.columns:
        if df[col].dtype == object:
            kinds = {type(v) for v in df[col] if v is not None and not _is_nan(v)}
            if len(kinds) > 1:
                df[col] = df[col].map(lambda v: None if _is_nan(v) else str(v))
    return df


def write_parquet_atomic(df, path: str | os.PathLike) -> None:
    """Write ``df`` so a concurrent reader sees either the old file or the new one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        df.to_parquet(tmp, index=False)
        if _KILL_BEFORE_REPLACE:  # fault injection for tests: die mid-write
            os.kill(os.getpid(), 9)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise StorageError(
            f"cannot write {path.name} in {path.parent}: {exc.strerror or exc}. "
            "The previous table is intact; free disk space and run `hpsearch resume`."
        ) from None


def write_tables(records: TrialRecords, sweep_dir: str | os.PathLike) -> None:
    write_parquet_atomic(records.trials_frame(), Path(sweep_dir) / TRIALS_FILE)
    write_parquet_atomic(records.history_frame(), Path(sweep_dir) / HISTORY_FILE)


def _table_path(path: str | os.PathLike, filename: str) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / filename
    if not path.exists():
        raise SweepNotFoundError(
            f"no {filename} at {path}: pass a sweep directory (e.g. runs/<name>) "
            "or the path of the table itself"
        )
    return path


def read_trials(path: str | os.PathLike):
    """Read a sweep's trial table (one row per trial) as a pandas DataFrame.

    Args:
        path: The sweep directory (``runs/<name>``) or the ``trials.parquet`` file. Safe to
            call while the sweep runs.

    Example:
        >>> import hpsearch
        >>> df = hpsearch.read_trials("runs/quickstart")          # doctest: +SKIP
        >>> df.sort_values("best_value").head()                   # doctest: +SKIP
    """
    import pandas as pd

    return pd.read_parquet(_table_path(path, TRIALS_FILE))


def read_history(path: str | os.PathLike):
    """Read a sweep's history table (one row per report per trial) as a DataFrame."""
    import pandas as pd

    return pd.read_parquet(_table_path(path, HISTORY_FILE))


def _last_error_line(trial) -> str | None:
    """The exception's last meaningful line from Tune's error file."""
    path = getattr(trial, "error_file", None)
    if not path or not os.path.exists(path):
        return None
    lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("File ", "^", "~"))]
    for line in reversed(lines):
        if "Error" in line or "Exception" in line:
            return line[:500]
    return lines[-1][:500] if lines else None


def write_single_trial(spec: Spec, params: Mapping[str, Any], reports: Iterable[Mapping[str, Any]],
                       directory: str | os.PathLike, *, trial_id: str = "trial") -> None:
    """Tables for one trial run without a sweep (``hpsearch trial --output``), with the
    same schema as a sweep's."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    records = TrialRecords(spec)
    records.start(trial_id, params)
    for report in reports:
        records.result(trial_id, report)
    records.end(trial_id)
    write_tables(records, directory)
