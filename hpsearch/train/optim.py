"""The optimizer a trial trains with, and what the loop reads of its steps."""

from __future__ import annotations

import torch
from torch import nn

from hpsearch.train.keys import HarnessConfig

__all__ = ["adamw", "skipped_steps", "total_norm"]


def adamw(model: nn.Module, cfg: HarnessConfig, *, fused: bool) -> torch.optim.AdamW:
    # Matrices and embeddings decay; biases and norm gains (fewer than 2 dims) do not.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused or None)


def total_norm(params: list[nn.Parameter]) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))


def skipped_steps(step: int, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> int:
    """Steps the fp16 scaler skipped: AdamW counts only the steps it really took."""
    if not scaler.is_enabled():
        return 0
    taken = max((float(s["step"]) for s in optimizer.state.values() if "step" in s), default=0.0)
    return step - int(taken)
