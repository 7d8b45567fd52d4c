"""hpsearch: hyperparameter search for PyTorch training on Ray clusters.

The public API is re-exported here lazily, so ``import hpsearch`` stays cheap and
``hpsearch validate`` never loads Ray or torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "load_space": "hpsearch.space",
    "Spec": "hpsearch.space",
    "HpsearchError": "hpsearch.errors",
    "SpaceError": "hpsearch.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hpsearch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
