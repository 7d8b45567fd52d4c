"""Training harness: lr schedule, precision, loop, checkpoints. Imports no Ray.

The names below are imported lazily, so ``import hpsearch.train`` (and
:func:`hpsearch.train.lr_at`) do not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "train": "hpsearch.train.loop",
    "TrainResult": "hpsearch.train.loop",
    "Workload": "hpsearch.train.workload",
    "cross_entropy": "hpsearch.train.workload",
    "accuracy": "hpsearch.train.workload",
    "lr_at": "hpsearch.train.schedule",
    "Session": "hpsearch.train.session",
    "LocalSession": "hpsearch.train.session",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hpsearch.train' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
