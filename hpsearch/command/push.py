"""``hpsearch.report(step=..., val_loss=...)``: a script's own reports, pushed.

Inside a command trial, hpsearch sets ``HPSEARCH_REPORT_FILE``; each call appends one JSON
line there, and the trial reads it as it grows (:mod:`hpsearch.command.sources`). Outside
hpsearch the call does nothing and says so once, as ``wandb.log`` without a run. Only rank
0 reports (``RANK`` unset or ``0``), as Tune forwards rank 0's metrics. Standard library
only: a training script pays nothing to import it.
"""

from __future__ import annotations

import json
import math
import os
import sys

__all__ = ["REPORT_FILE_ENV", "report"]

#: The variable that names the file a trial reads pushed reports from.
REPORT_FILE_ENV = "HPSEARCH_REPORT_FILE"
_told = False


def report(**metrics: float) -> None:
    """Report metrics to the trial this process runs in (a no-op outside hpsearch).

    Example:
        >>> import hpsearch
        >>> hpsearch.report(step=100, val_loss=1.25)  # doctest: +SKIP

    Raises:
        TypeError: A value is not a number.
    """
    global _told
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                metrics[key] = float(value)  # a 0-d tensor, a numpy scalar
            except (TypeError, ValueError):
                raise TypeError(f"hpsearch.report: {key} must be a number, got "
                                f"{type(value).__name__}") from None
    path = os.environ.get(REPORT_FILE_ENV)
    if not path:
        if not _told:
            _told = True
            print("hpsearch.report: not running under hpsearch; reports are dropped",
                  file=sys.stderr)
        return
    if os.environ.get("RANK", "0") != "0":
        return
    row = {k: (v if math.isfinite(v) else str(v)) for k, v in metrics.items()}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
