"""A worker's batches: which samples it takes each epoch, and how they reach its device."""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

__all__ = ["batch_source", "epochs_done", "index_chunks", "to_device"]


def index_chunks(sampler: DistributedSampler, batch_size: int) -> list[torch.Tensor]:
    """This worker's batches of one epoch as index tensors; a ragged tail is dropped.

    The indices are exactly those ``iter(sampler)`` yields (shuffle=True, drop_last=True),
    computed with tensor ops: iterating the sampler builds Python lists and costs ~15x more,
    which shows on small models with short epochs.
    """
    g = torch.Generator()
    g.manual_seed(sampler.seed + sampler.epoch)
    order = torch.randperm(len(sampler.dataset), generator=g)
    indices = order[sampler.rank : sampler.total_size : sampler.num_replicas]
    n = len(indices) // batch_size
    return list(indices[: n * batch_size].view(n, batch_size))


def batch_source(device: torch.device, num_workers: int):
    """A function ``(dataset, index_chunks) -> iterator of batches on device``."""
    on_cpu = device.type == "cpu"

    def batches(dataset: Dataset, chunks: list[torch.Tensor]) -> Iterator[Any]:
        if isinstance(dataset, TensorDataset):
            # Indexing the tensors is one gather per tensor instead of a collate per sample.
            tensors = dataset.tensors
            if tensors[0].device.type != "cpu":  # a dataset already on the accelerator
                chunks = [idx.to(tensors[0].device) for idx in chunks]
            for idx in chunks:
                batch = tuple([t[idx] for t in tensors])
                yield batch if on_cpu else to_device(batch, device)
        elif hasattr(dataset, "get_batch"):
            for idx in chunks:
                batch = dataset.get_batch(idx)
                yield batch if on_cpu else to_device(batch, device)
        else:
            loader = DataLoader(
                dataset,
                batch_sampler=[idx.tolist() for idx in chunks],
                num_workers=num_workers,
                pin_memory=not on_cpu,
            )
            for batch in loader:
                yield batch if on_cpu else to_device(batch, device)

    return batches


def to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` on ``device``. A CPU tensor bound for CUDA is pinned first, so that its copy
    is asynchronous and overlaps the step before it (nanoGPT's ``pin_memory().to(...,
    non_blocking=True)``); from pageable memory ``non_blocking`` copies synchronously."""
    if isinstance(batch, torch.Tensor):
        if device.type == "cuda" and batch.device.type == "cpu":
            batch = batch.pin_memory()
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def epochs_done(epoch: int, batch_in_epoch: int, steps_per_epoch: int) -> float:
    if batch_in_epoch == 0:
        return epoch
    if batch_in_epoch >= steps_per_epoch:
        return epoch + 1
    return epoch + batch_in_epoch / steps_per_epoch
