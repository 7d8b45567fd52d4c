"""Numeric precision: one path for fp32, tf32, bf16 and fp16 (nanoGPT style).

The forward pass runs under ``torch.autocast`` for bf16 and fp16 (a ``nullcontext`` for
fp32), and the backward pass always goes through a ``torch.amp.GradScaler`` that is
enabled only for fp16. With the scaler disabled, ``scale``, ``unscale_``, ``step`` and
``update`` are pass-throughs, so the loop has no precision branches.

TF32 is set on every trial, never left as the process had it (:meth:`Precision.apply`):
the flags are process-wide, so a trial in a reused process would otherwise train with
whatever an earlier trial, or the trainable's own code, chose. Only ``tf32`` turns it on;
``fp32`` is strict, and so are the fp32 parts of a ``bf16`` or ``fp16`` trial. The flags
are set through one API, the one that leaves every torch precision getter readable after
it (:func:`set_tf32`), so ``torch.compile`` and user code in the same process still work.

Autocast works on the CPU too (torch >= 2.4 runs both bf16 and fp16 there), and so does
``GradScaler("cpu")``. Whether the hardware can run a precision is asked with
:func:`unsupported_reason` before training starts; the loop turns a reason into a final
``unsupported_precision`` report instead of crashing.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import ContextManager

import torch

from hpsearch.train.keys import PRECISIONS  # the one list of precisions, re-exported here

__all__ = ["PRECISIONS", "Precision", "set_tf32", "unsupported_reason"]

_DTYPES = {"fp32": None, "tf32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """How the forward and backward passes run for one precision on one device type.

    Attributes:
        name: ``"fp32"``, ``"tf32"``, ``"bf16"`` or ``"fp16"``.
        device_type: ``"cpu"``, ``"cuda"``, ... (what ``torch.autocast`` takes).
    """

    name: str
    device_type: str

    def __post_init__(self) -> None:
        if self.name not in PRECISIONS:
            raise ValueError(f"precision: must be one of {', '.join(PRECISIONS)} (got {self.name!r})")

    @property
    def dtype(self) -> torch.dtype | None:
        """The autocast dtype, ``None`` for fp32."""
        return _DTYPES[self.name]

    def autocast(self) -> ContextManager:
        """A context for the forward pass (and the loss). Reusable across steps."""
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    @property
    def tf32(self) -> bool:
        """Whether fp32 matmuls and convolutions may use TF32 (CUDA only)."""
        return self.name == "tf32" and self.device_type == "cuda"

    def apply(self) -> str:
        """Set the process's fp32 matmul and cuDNN precision for this trial; return it
        (``tf32`` or ``ieee``, what the history records)."""
        set_tf32(self.tf32)
        return "tf32" if self.tf32 else "ieee"

    def grad_scaler(self, init_scale: float = 2.0**16) -> torch.amp.GradScaler:
        """A scaler that is enabled for fp16 only; bf16 has fp32's range and needs none."""
        return torch.amp.GradScaler(self.device_type, init_scale=init_scale, enabled=self.name == "fp16")


def set_tf32(on: bool) -> None:
    """TF32 on or off for CUDA matmuls and cuDNN (convolutions and RNNs).

    Set through the legacy ``allow_tf32`` setters, which in torch 2.13 also set the newer
    ``fp32_precision`` flags to agree (``tf32`` or ``ieee`` for matmuls; ``tf32`` or
    ``none`` for cuDNN conv and RNN). torch refuses its legacy getters
    (``torch.get_float32_matmul_precision()``, ``torch.backends.cuda.matmul.allow_tf32``,
    ``torch.backends.cudnn.allow_tf32``) once the newer flags disagree with them, and
    inductor (``torch.compile``) and libraries read those getters: setting the newer flags
    alone would break the next user of a reused worker process. The legacy setters leave
    every getter, legacy and new, readable, and also repair a process whose own code had
    set the newer flags alone.
    """
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def unsupported_reason(name: str, device: torch.device) -> str | None:
    """Why ``device`` cannot train in precision ``name``, or ``None`` if it can.

    fp32 always runs; tf32 runs on CUDA GPUs of compute capability 8.0+. On CUDA, bf16 needs native support (compute capability 8.0+,
    ``torch.cuda.is_bf16_supported(including_emulation=False)``). Elsewhere the answer comes
    from running one small matmul under autocast on the device, so it reflects what this
    torch build and this machine really do.

    Raises:
        ValueError: ``name`` is not a known precision (a config error, not a hardware one).
    """
    Precision(name, device.type)  # validates the name
    if name == "fp32":
        return None
    if name == "tf32":
        if device.type != "cuda":
            return f"tf32 is a CUDA GPU format (Ampere and later); on {device.type} use fp32"
        if torch.cuda.get_device_capability(device) < (8, 0):
            gpu = torch.cuda.get_device_name(device)
            return f"tf32 needs compute capability >= 8.0; {gpu} has " + ".".join(
                str(v) for v in torch.cuda.get_device_capability(device))
        return None
    if device.type == "cuda":
        if name == "bf16" and not _cuda_bf16_supported(device):
            capability = ".".join(str(v) for v in torch.cuda.get_device_capability(device))
            gpu = torch.cuda.get_device_name(device)
            return f"bf16 needs a GPU with native bfloat16 (compute capability >= 8.0); {gpu} has {capability}"
        return None
    if not _autocast_runs(device, _DTYPES[name]):
        return f"{name} autocast does not run on device type {device.type!r} with torch {torch.__version__}"
    return None


def _cuda_bf16_supported(device: torch.device) -> bool:
    with torch.cuda.device(device):
        try:
            return torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch < 2.3 has no including_emulation and never emulates
            return torch.cuda.is_bf16_supported()


def _autocast_runs(device: torch.device, dtype: torch.dtype) -> bool:
    if not torch.amp.is_autocast_available(device.type):
        return False
    try:
        with torch.autocast(device_type=device.type, dtype=dtype):
            a = torch.ones(4, 4, device=device)
            out = a @ a
        return out.dtype == dtype and bool(torch.isfinite(out.float()).all())
    except (RuntimeError, TypeError, ValueError):
        return False
