"""The training loop's config keys: names, defaults and allowed values. Imports no torch.

This is the harness's published contract. The loop reads its config through
:meth:`HarnessConfig.from_config`, and ``hpsearch validate`` checks a space against the same
rules (:data:`KEYS`): every fixed value, both ends of every searched range and every
choice, before any trial starts. Keys not listed here are passed to the workload untouched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from numbers import Real
from typing import Any, Literal, Mapping

__all__ = ["KEYS", "PRECISIONS", "HarnessConfig", "Key", "key_problem"]

#: ``fp32`` is strict IEEE fp32 (no TF32 anywhere); ``tf32`` lets CUDA matmuls and
#: convolutions use TF32 (Ampere and later); ``bf16`` and ``fp16`` run under autocast.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


@dataclass(frozen=True)
class Key:
    """One config key of the loop and the values it accepts.

    Attributes:
        name: The key.
        kind: ``float``, ``int``, ``choice`` or ``bool``.
        low, high: Bounds for numbers (``None``: unbounded).
        low_open, high_open: Whether the bound itself is excluded.
        choices: The allowed values of a ``choice`` key.
    """

    name: str
    kind: Literal["float", "int", "choice", "bool"]
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()

    def issue(self, value: Any) -> tuple[str, str] | None:
        """``(kind, message)`` when ``value`` is not allowed, as ``hpsearch validate``
        reports it (kind ``choice``, ``type`` or ``range``), else ``None``."""
        message = self.problem(value)
        if message is None:
            return None
        if self.kind in ("choice", "bool"):
            return "choice", message
        return ("type" if message.startswith("must be a number") else "range"), message

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not allowed (``must be > 0 (got 0)``), or ``None``."""
        if self.kind == "choice":
            if value in self.choices and not isinstance(value, bool):
                return None
            return f"must be one of {', '.join(map(str, self.choices))} (got {value!r})"
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"must be true or false (got {value!r})"
        if isinstance(value, bool) or not isinstance(value, Real):
            return f"must be a number (got {value!r})"
        if self.kind == "int" and (not math.isfinite(value) or float(value) != int(value)):
            return f"must be an integer (got {value!r})"
        if not math.isfinite(value):
            return f"must be a finite number (got {value!r})"
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return f"must be {'>' if self.low_open else '>='} {self.low:g} (got {value:g})"
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return f"must be {'<' if self.high_open else '<='} {self.high:g} (got {value:g})"
        return None


def _keys(*keys: Key) -> dict[str, Key]:
    return {k.name: k for k in keys}


#: Every key the loop reads, with its rule (the defaults are :class:`HarnessConfig`'s).
KEYS: Mapping[str, Key] = _keys(
    Key("lr", "float", low=0.0, low_open=True),
    Key("warmup_steps", "int", low=0),
    Key("min_lr", "float", low=0.0),
    Key("precision", "choice", choices=PRECISIONS),
    Key("weight_decay", "float", low=0.0),
    Key("beta1", "float", low=0.0, high=1.0, high_open=True),
    Key("beta2", "float", low=0.0, high=1.0, high_open=True),
    Key("batch_size", "int", low=1),
    Key("grad_clip", "float", low=0.0),
    Key("epochs", "int", low=1),
    Key("max_steps", "int", low=1),
    Key("eval_every", "int", low=1),
    Key("log_every", "int", low=1),
    Key("eval_batch_size", "int", low=1),
    Key("seed", "int"),
    Key("loss_scale_init", "float", low=0.0, low_open=True),
    Key("checkpoint_every", "int", low=0),
    Key("diverge_factor", "float", low=0.0),
    Key("diverge_window", "int", low=1),
    Key("num_workers", "int", low=0),
    Key("use_gpu", "bool"),
)


def key_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not allowed for the loop's key ``name`` (``None``: allowed, or not a
    key of the loop)."""
    key = KEYS.get(name)
    return None if key is None else key.problem(value)


@dataclass(frozen=True)
class HarnessConfig:
    """The loop's own config keys, validated. See :mod:`hpsearch.train.loop` for meanings."""

    lr: float
    warmup_steps: int = 0
    min_lr: float | None = None
    precision: str = "fp32"
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    batch_size: int = 64
    grad_clip: float = 1.0
    epochs: int | None = None
    max_steps: int | None = None
    eval_every: int | None = None
    log_every: int | None = None
    eval_batch_size: int | None = None
    seed: int = 0
    loss_scale_init: float = 2.0**16
    checkpoint_every: int = 1
    diverge_factor: float = 10.0
    diverge_window: int = 32
    num_workers: int = 0
    use_gpu: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "HarnessConfig":
        """Read and check the loop's keys; raise ValueError naming the key, rule and value."""
        if "lr" not in config:
            raise ValueError("config.lr: required (the peak learning rate)")
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = config.get(f.name)
            if value is None:
                continue
            if f.name == "use_gpu":  # a truthy flag, as callers have always passed it
                values[f.name] = bool(value)
                continue
            problem = KEYS[f.name].problem(value)
            if problem:
                raise ValueError(f"config.{f.name}: {problem}")
            kind = KEYS[f.name].kind
            values[f.name] = int(value) if kind == "int" else float(value) \
                if kind == "float" else value
        out = cls(**values)
        if out.min_lr is None:
            out = _replace(out, min_lr=out.lr / 10)
        if out.min_lr > out.lr:
            raise ValueError(f"config.min_lr: must be <= lr ({out.lr}) (got {out.min_lr})")
        if out.epochs is None and out.max_steps is None:
            raise ValueError("config: one of epochs, max_steps is required (the training budget)")
        return out


def _replace(cfg: HarnessConfig, **changes: Any) -> HarnessConfig:
    from dataclasses import replace

    return replace(cfg, **changes)


assert set(KEYS) == {f.name for f in fields(HarnessConfig)}  # one list of keys, not two
