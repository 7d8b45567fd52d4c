"""hpsearch: hyperparameter search for PyTorch training on Ray clusters.

The public API is re-exported here lazily, so ``import hpsearch`` stays cheap and
``hpsearch validate`` never loads Ray or torch.

Packages, in the order data flows through them::

    space/      YAML -> validated, frozen Spec          (no Ray, no torch)
    workloads/  built-in trainables; finding a trainable reference without running it
    train/      the training harness: loop, lr schedule, precision, checkpoints (no Ray)
    driver/     everything that talks to Ray: plan, search, runners, callbacks, fit, resume
    store/      the sweep directory: layout, records, tables, manifest, retention (no Ray)
    cli/        one thin module per command
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
    "run_sweep": "hpsearch.driver.sweep.run",
    "resume_sweep": "hpsearch.driver.sweep.run",
    "SweepResult": "hpsearch.driver.sweep.result",
    "list_sweeps": "hpsearch.store.listing",
    "SweepDir": "hpsearch.store.layout",
    # trial tables, for notebooks
    "read_trials": "hpsearch.store.tables",
    "read_history": "hpsearch.store.tables",
    # bring your own model
    "Workload": "hpsearch.train.workload",
    # inside a command trainable's script
    "report": "hpsearch.command.push",
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
