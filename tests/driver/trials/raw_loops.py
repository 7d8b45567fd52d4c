"""Raw Ray Train loops for the sweep tests (imported by Ray workers as
``tests.driver.trials.raw_loops:<name>`` from the repository root)."""

from __future__ import annotations

import os


def reports_each_epoch(config: dict) -> None:
    """An ordinary raw loop: reports val_mse each epoch, no checkpoint, and returns after
    ``stop_after`` epochs (before max_t) or at its budget."""
    import ray.train

    last = min(int(config["epochs"]), int(config.get("stop_after", config["epochs"])))
    for epoch in range(1, last + 1):
        ray.train.report({"val_mse": config["lr"] * 10 / epoch, "epoch": epoch})


def reports_other_metrics(config: dict) -> None:
    import ray.train

    for epoch in range(1, int(config["epochs"]) + 1):
        ray.train.report({"mse": 1.0 / epoch, "epoch": epoch})


def raises_after_one_report(config: dict) -> None:
    import ray.train

    ray.train.report({"val_mse": 1.0, "epoch": 1})
    raise RuntimeError("user code failed after its first report")


def worker_dies_before_reporting(config: dict) -> None:
    import ray.train

    if ray.train.get_context().get_world_rank() == 1:
        os._exit(1)
    ray.train.report({"val_mse": 1.0, "epoch": 1})


def process_group_fails(config: dict) -> None:
    """Setup failure as a broken NCCL/gloo would give it: the collective layer raises."""
    import torch.distributed as dist

    dist.all_reduce(__import__("torch").ones(1), op="not-an-op")  # raises at once
