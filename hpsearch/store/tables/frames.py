"""Records -> DataFrames, with the column types both tables store.

Types are fixed where the spec fixes them, so that a column empty in this sweep (no error
yet, a conditional parameter never sampled) has the same Arrow type as in every other
sweep; a column whose values mix types (choices ``[32, auto]``) is stored as strings.
:mod:`.writer` builds the same trial table without pandas where it can.
"""

from __future__ import annotations

from typing import Any, Mapping

from hpsearch.space.spec import TRIAL_COLUMNS, Spec
from hpsearch.store.records import TrialRecords

__all__ = ["flag_columns", "history_frame", "history_rows_frame", "objective_columns",
           "trial_columns", "trials_frame"]


# The trial table's columns by type, as trials_frame makes them.
_FLOAT_COLUMNS = ("final_value", "best_value", "wall_s", "worker_s", "gpu_s", "startup_s",
                  "best_epoch", "epochs")
_INT_COLUMNS = ("best_step", "steps", "optuna_trial")
_STRING_COLUMNS = ("trial_id", "status", "precision_used", "checkpoint", "error")
_TIME_COLUMNS = ("started_at", "ended_at")


def objective_columns(spec: Spec) -> list[str]:
    """One column per objective, named after its metric, with several objectives."""
    return [o.metric for o in spec.objectives] if spec.several_objectives else []


def flag_columns(spec: Spec) -> list[str]:
    """``feasible`` with constraints, ``pareto`` with several objectives."""
    return ["feasible"] * bool(spec.constraints) + ["pareto"] * spec.several_objectives


def trial_columns(spec: Spec) -> list[str]:
    """The trial table's columns, in order (``docs/trial-tables.md``): the objectives'
    and the flags' come after ``final_value``, so that the parameters stay between
    ``status`` and it."""
    params = [p.name for p in spec.params if p.name not in TRIAL_COLUMNS]
    return ["trial_id", "status", *params, "final_value", *objective_columns(spec),
            *flag_columns(spec), *TRIAL_COLUMNS[3:]]


def trials_frame(records: TrialRecords):
    """The trial table of ``records`` as a DataFrame with stable column types."""
    import pandas as pd

    spec = records.spec
    res = spec.resources
    params = [p.name for p in spec.params if p.name not in TRIAL_COLUMNS]
    columns = trial_columns(spec)
    rows = list(records.trials.values())
    # Built column by column (one list per column, not one dict per row): the whole table
    # is converted at every write, ~10 ms per 1,000 trials.
    data = {c: [row.get(c) for row in rows] for c in columns}
    walls = data["wall_s"]
    per_worker, per_gpu = res.workers, res.per_trial().get("GPU", 0.0)
    data["worker_s"] = [None if w is None else w * per_worker for w in walls]
    data["gpu_s"] = [None if w is None else w * per_gpu for w in walls]
    df = pd.DataFrame(data, columns=columns)
    for col in ("started_at", "ended_at"):
        # Always nanoseconds: pandas picks the unit from the values (seconds for a column
        # of None, microseconds for times read back from Parquet on a resume).
        df[col] = pd.to_datetime(df[col], unit="s", utc=True).dt.as_unit("ns")
    for col in ("final_value", "best_value", "wall_s", "worker_s", "gpu_s", "startup_s"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    for col in ("best_step", "steps", "optuna_trial"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in ("best_epoch", "epochs", *objective_columns(spec)):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    for col in flag_columns(spec):
        df[col] = df[col].astype("boolean")
    # Fixed types, so a column that is empty in this sweep (no error yet, a conditional
    # parameter never sampled) has the same Arrow type as in every other sweep.
    for col in ("trial_id", "status", "precision_used", "checkpoint", "error"):
        df[col] = df[col].astype("string")
    for p in spec.params:
        if p.name not in params:
            continue
        if p.type == "float":
            df[p.name] = pd.to_numeric(df[p.name], errors="coerce").astype("float64")
        elif p.type == "int":
            df[p.name] = pd.to_numeric(df[p.name], errors="coerce").astype("Int64")
        elif all(isinstance(c, str) for c in p.choices):
            df[p.name] = df[p.name].astype("string")
    return _arrow_safe(df)[0]


def history_frame(records: TrialRecords):
    """The history table of ``records`` as a DataFrame."""
    return history_rows_frame(records.history)[0]


def history_rows_frame(rows: list[Mapping[str, Any]]):
    """History rows as a DataFrame, and the columns stored as strings."""
    import pandas as pd

    df = pd.DataFrame(rows)
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
    return value is None or (isinstance(value, float) and value != value)


def _arrow_safe(df):
    """Columns mixing types (e.g. categorical choices ``[32, auto]``) become strings, so
    the Parquet schema stays one type per column. Returns the frame and those columns."""
    strings = set()
    for col in df.columns:
        if df[col].dtype == object:
            kinds = {type(v) for v in df[col] if not _is_nan(v)}
            if len(kinds) > 1:
                df[col] = df[col].map(lambda v: None if _is_nan(v) else str(v))
                strings.add(col)
    return df, strings
