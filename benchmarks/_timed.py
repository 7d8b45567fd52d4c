"""A digits workload that stamps the wall clock at the points a start-up benchmark needs.

Used by ``trial_startup.py`` and ``sweep_efficiency.py`` as ``trainable:
benchmarks._timed:WORKLOAD``. Each worker appends one JSON line per event to the file
named by the config key ``timing_file``: ``data`` when the harness builds its data (the
worker is up, torch imported, the process group formed) and ``step`` at every training
step. Trials are told apart by their ``lr``. Clocks agree: everything runs on one machine.
"""

from __future__ import annotations

import json
import os
import time

from hpsearch.train.workload import Workload, cross_entropy
from hpsearch.workloads import digits

_state: dict = {}


def _stamp(event: str) -> None:
    f = _state.get("file")
    if f is not None:
        f.write(json.dumps({"trial": _state["trial"], "event": event, "t": time.time(),
                            "pid": os.getpid()}) + "\n")
        f.flush()


def build_data(config: dict):
    path = config.get("timing_file")
    _state.update(file=open(path, "a") if path else None, trial=repr(config.get("lr")))
    _stamp("data")
    return digits.build_data(config)


def loss(model, batch):
    if model.training:
        _stamp("step")
    return cross_entropy(model, batch)


WORKLOAD = Workload(build_model=digits.build_model, build_data=build_data, loss=loss,
                    metrics=digits.WORKLOAD.metrics, description="digits with timing stamps")


def read_stamps(path: str) -> dict[str, dict[str, float]]:
    """``{trial: {"data": t, "first_step": t, "last_step": t}}`` (earliest data stamp)."""
    out: dict[str, dict[str, float]] = {}
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            row = out.setdefault(rec["trial"], {})
            if rec["event"] == "data":
                row["data"] = min(row.get("data", rec["t"]), rec["t"])
            else:
                row["first_step"] = min(row.get("first_step", rec["t"]), rec["t"])
                row["last_step"] = max(row.get("last_step", rec["t"]), rec["t"])
    return out
