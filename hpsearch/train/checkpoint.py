"""Checkpoints: one dict in one file, written by rank 0 (nanoGPT style).

The dict holds everything needed to continue a run as if it had never stopped: model,
optimizer and fp16 scaler state, the position in the data (epoch and batch within it,
since the data order is a function of seed and epoch alone), every rank's random-number
generator states, and the config it ran with.

It holds tensors and plain Python values only, so it loads with ``torch.load``'s safe
``weights_only=True``: restoring a checkpoint runs no pickled code.
"""

from __future__ import annotations

import os
import random
import tempfile
from typing import Any, Mapping

import numpy as np
import torch

__all__ = ["CHECKPOINT_FILE", "FORMAT_VERSION", "discard", "estimate_bytes", "plain", "save",
           "load", "rng_state", "set_rng_state"]

CHECKPOINT_FILE = "checkpoint.pt"
FORMAT_VERSION = 1
_TEMP_PREFIX = "hpsearch-ckpt-"


def save(state: dict[str, Any], directory: str | None = None) -> str:
    """Write ``state`` to ``<directory>/checkpoint.pt`` (a new temporary directory if none).

    Returns:
        The directory. Whoever receives it (the session) owns it from then on.
    """
    directory = directory or tempfile.mkdtemp(prefix=_TEMP_PREFIX)
    path = os.path.join(directory, CHECKPOINT_FILE)
    tmp = path + ".tmp"
    torch.save({"format": FORMAT_VERSION, **state}, tmp)
    os.replace(tmp, path)  # a crash mid-write never leaves a truncated checkpoint.pt
    return directory


def estimate_bytes(build_model, config: Mapping[str, Any]) -> int | None:
    """About how many bytes :func:`save` writes for the model ``build_model(config)``
    makes: its parameters and buffers in fp32 (autocast keeps fp32 weights) and AdamW's two
    moments per parameter, plus a little for the generator states and the config. The
    model is built on the meta device: nothing is allocated and no data is read. ``None``
    when it cannot be built there.

    Example:
        >>> estimate_bytes(lambda c: torch.nn.Linear(1000, 1000), {})  # 1.001M parameters
        12076000
    """
    try:
        with torch.device("meta"):
            model = build_model(dict(config))
        params = sum(p.numel() for p in model.parameters())
        buffers = sum(b.numel() for b in model.buffers())
    except Exception:  # noqa: BLE001 - a model that needs real tensors: no estimate
        return None
    return 12 * params + 4 * buffers + 64_000


def discard(directory: str) -> None:
    """Delete a temporary checkpoint directory :func:`save` made, and nothing else: the
    path must be a ``hpsearch-ckpt-*`` directory directly in the temporary directory."""
    from hpsearch.fence import remove_inside

    parent, name = os.path.split(os.path.normpath(directory))
    if not name.startswith(_TEMP_PREFIX) or os.path.realpath(parent) != os.path.realpath(
            tempfile.gettempdir()):
        raise ValueError(f"refusing to delete {directory!r}: not a temporary checkpoint "
                         "directory hpsearch made")
    remove_inside(parent, directory)


def load(directory: str) -> dict[str, Any]:
    """Read the checkpoint in ``directory`` onto the CPU.

    Raises:
        FileNotFoundError: ``directory`` holds no ``checkpoint.pt``.
        ValueError: The file was written by an incompatible version of the harness.
    """
    path = os.path.join(directory, CHECKPOINT_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {CHECKPOINT_FILE} in checkpoint directory {directory!r}")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: checkpoint format must be {FORMAT_VERSION} (got {state.get('format')!r}); "
            "it was written by another version of hpsearch"
        )
    return state


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's generator states: torch (CPU and ``device``'s), numpy, random."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "random": _python_random_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_state["bit_generator"],
            "state": {"key": np_state["key"].numpy().astype(np.uint32), "pos": np_state["pos"]},
            "has_gauss": np_state["has_gauss"],
            "gauss": np_state["gauss"],
        }
    )
    version, internal, gauss_next = state["random"]
    random.setstate((version, tuple(internal), gauss_next))


def _python_random_state() -> tuple[int, list[int], float | None]:
    version, internal, gauss_next = random.getstate()
    return version, list(internal), gauss_next


def plain(value: Any) -> Any:
    """Config values as types ``torch.load(weights_only=True)`` accepts."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):  # before float: np.float64 is a float subclass
        return value.item()
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return repr(value)
