"""Reading the tables back: :func:`read_trials` and :func:`read_history` for notebooks
(pandas and pyarrow only), and table cells as plain Python values."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from hpsearch.errors import DamagedSweepError, SweepNotFoundError
from hpsearch.store.layout import SweepDir
from hpsearch.store.parts import read_dataset

__all__ = ["python_value", "read_history", "read_trials"]


def _table_path(path: str | os.PathLike, which: str) -> Path:
    path = Path(path)
    if path.is_dir() and not (which == "history" and SweepDir.is_history_dataset(path)):
        path = getattr(SweepDir.of(path), which)
    if not path.exists():
        raise SweepNotFoundError(
            f"no {which} table at {path}: pass a sweep directory (e.g. runs/<name>) "
            "or the path of the table itself"
        )
    return path


def _read_parquet(path: Path):
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure means a damaged file
        raise DamagedSweepError(
            f"{path} cannot be read as a table ({type(exc).__name__}: {_short(exc)})"
        ) from None


def read_trials(path: str | os.PathLike):
    """Read a sweep's trial table (one row per trial) as a pandas DataFrame.

    Args:
        path: The sweep directory (``runs/<name>``) or the ``trials.parquet`` file. Safe to
            call while the sweep runs.

    Raises:
        SweepNotFoundError: There is no trial table there.
        DamagedSweepError: The file is not a readable table.

    Example:
        >>> import hpsearch
        >>> df = hpsearch.read_trials("runs/quickstart")          # doctest: +SKIP
        >>> df.sort_values("best_value").head()                   # doctest: +SKIP
    """
    return _read_parquet(_table_path(path, "trials"))


def read_history(path: str | os.PathLike):
    """Read a sweep's history table (one row per report per trial) as a DataFrame.

    Args:
        path: The sweep directory, or ``history.parquet`` itself: a directory of parts, or
            the single file of a sweep written before layout 3. Safe to call while the
            sweep runs: parts a writer merges meanwhile are read again.

    Raises:
        SweepNotFoundError: There is no history table there.
        DamagedSweepError: A part or the file is not a readable table.
    """
    path = _table_path(path, "history")
    if path.is_dir():
        table = read_dataset(path)
        return _empty_history() if table is None else table.to_pandas()
    return _read_parquet(path)


def _empty_history():
    import pandas as pd

    return pd.DataFrame(columns=["trial_id", "step", "epoch", "time_total_s"])


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def python_value(value: Any) -> Any:
    """A table cell as a plain Python value: numpy scalars unwrapped, NaN/NA/NaT -> None."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, TypeError):
            pass
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
    except ImportError:  # pragma: no cover - pandas is a dependency
        pass
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
