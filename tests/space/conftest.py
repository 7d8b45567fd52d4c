"""Shared fixtures: a valid space file that tests mutate."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

#: A complete, valid space (lines are referred to by number in some tests).
VALID = textwrap.dedent(
    """\
    name: lm-test
    trainable: charlm
    objective: {metric: val_loss, mode: min}
    params:
      lr:           {type: float, low: 1.0e-4, high: 3.0e-2, log: true}
      warmup_steps: {type: int, low: 0, high: 400, step: 50}
      precision:    {type: categorical, choices: [fp32, bf16, fp16]}
      loss_scale_init: {type: float, low: 1024, high: 65536, log: true, when: {precision: fp16}}
      weight_decay: {type: float, low: 0.0, high: 0.1}
      batch_size: 64
    search:    {algorithm: tpe, seed: 0, n_startup_trials: 8}
    scheduler: {type: asha, time_attr: epoch, max_t: 12, grace_period: 1, reduction_factor: 3}
    trials:    {num: 32, max_concurrent: auto}
    resources: {workers: 2, use_gpu: false, cpus_per_worker: 1, gpus_per_worker: 0}
    budget:    {time: 8h}
    storage:   ./runs
    checkpoints: {keep: 2, keep_best_trials: 3}
    """
)


@pytest.fixture
def write(tmp_path: Path):
    """``write(text, name="space.yaml") -> path`` writes a file in a fresh folder."""

    def _write(text: str | bytes, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return _write
