"""hpsearch: hyperparameter search for PyTorch training on Ray clusters.

The public API is re-exported here lazily, so ``import hpsearch`` stays cheap and
``hpsearch validate`` never loads Ray or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # space file -> validated spec
    "load_space": "hpsearch.space",
    "parse_space": "hpsearch.space",
    "apply_overrides": "hpsearch.space",
    "Spec": "hpsearch.space",
    # sweeps
    "run_sweep": "hpsearch.sweep",
    "resume_sweep": "hpsearch.sweep",
    "list_sweeps": "hpsearch.sweep",
    "SweepResult": "hpsearch.sweep",
    # trial tables, for notebooks
    "read_trials": "hpsearch.tables",
    "read_history": "hpsearch.tables",
    # bring your own model
    "Workload": "hpsearch.train.workload",
    # errors
    "HpsearchError": "hpsearch.errors",
    "SpaceError": "hpsearch.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
