"""Learning-rate schedule: linear warmup, cosine decay, floor. Pure math; imports no torch.

The loop calls :func:`lr_at` with the index of the optimizer step it is about to take
(0 for the first step) and sets that value on every parameter group before the step.
"""

from __future__ import annotations

import math

__all__ = ["lr_at"]


def lr_at(step: int, *, lr: float, warmup_steps: int, total_steps: int, min_lr: float) -> float:
    """The learning rate for optimizer step ``step`` (0-based).

    Three cases, in this order (nanoGPT's ``get_lr``):

    1. Warmup, ``step < warmup_steps``: ``lr * (step + 1) / warmup_steps``. The first step
       gets ``lr / warmup_steps`` and step ``warmup_steps - 1`` gets the full ``lr``, so
       no step is wasted at a learning rate of 0.
    2. Floor, ``step >= total_steps``: ``min_lr``.
    3. Cosine decay from ``lr`` at ``step == warmup_steps`` to ``min_lr`` at
       ``step == total_steps``.

    With ``warmup_steps >= total_steps`` every step inside the budget is a warmup step:
    the rate ramps up linearly and never decays.

    Args:
        step: Optimizer steps already taken (>= 0).
        lr: Peak learning rate (> 0).
        warmup_steps: Length of the linear warmup (>= 0; 0 disables it).
        total_steps: Step at which the cosine reaches ``min_lr`` (>= 0).
        min_lr: Floor of the decay (0 <= min_lr <= lr).

    Returns:
        The learning rate as a float.

    Example:
        >>> lr_at(0, lr=1.0, warmup_steps=4, total_steps=12, min_lr=0.1)
        0.25
        >>> lr_at(8, lr=1.0, warmup_steps=4, total_steps=12, min_lr=0.1)
        0.55
        >>> lr_at(99, lr=1.0, warmup_steps=4, total_steps=12, min_lr=0.1)
        0.1
    """
    _check_schedule_arguments(step=step, lr=lr, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    coeff = 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr + coeff * (lr - min_lr)


def _check_schedule_arguments(*, step: int, lr: float, warmup_steps: int, total_steps: int, min_lr: float) -> None:
    if step < 0:
        raise ValueError(f"step: must be >= 0 (got {step})")
    if not lr > 0:
        raise ValueError(f"lr: must be > 0 (got {lr})")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps: must be >= 0 (got {warmup_steps})")
    if total_steps < 0:
        raise ValueError(f"total_steps: must be >= 0 (got {total_steps})")
    if not 0 <= min_lr <= lr:
        raise ValueError(f"min_lr: must satisfy 0 <= min_lr <= lr (got min_lr={min_lr}, lr={lr})")
