"""What the training loop trains: a model, its data, a loss and eval metrics.

A :class:`Workload` is a frozen bundle of plain functions, so one defined at module level
pickles by reference and travels to Ray workers. The common case, a classifier fed
``(x, y)`` batches, needs only a model and data::

    from hpsearch.train import Workload, accuracy

    WORKLOAD = Workload(
        build_model=lambda config: MyNet(width=config.get("width", 128)),
        build_data=lambda config: (train_set, val_set),
        metrics=accuracy,  # reported as val_accuracy
    )

Datasets are ordinary map-style ``torch.utils.data.Dataset`` objects. Two optional hooks
make them faster or fresher, and the loop uses them when present:

* ``get_batch(indices: LongTensor) -> batch``: fetch a whole batch at once instead of
  ``len(indices)`` calls to ``__getitem__`` plus collation. ``TensorDataset`` gets this
  for free (the loop indexes its tensors directly).
* ``set_epoch(epoch: int)``: called on the training set before each epoch, e.g. to
  resample random crops or windows. It must be a deterministic function of the config's
  seed and ``epoch``, or resuming from a checkpoint will not reproduce the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.data import Dataset

__all__ = ["Workload", "cross_entropy", "accuracy"]

LossOutput = Union["torch.Tensor", "tuple[torch.Tensor, Any]"]


def cross_entropy(model: "nn.Module", batch: Any) -> "tuple[torch.Tensor, torch.Tensor]":
    """The default loss: ``batch`` is ``(x, y)``, ``model(x)`` returns logits.

    Logits of any shape ``(..., classes)`` with targets of shape ``(...)`` work, so a
    classifier and a language model (``(batch, time, vocab)`` vs ``(batch, time)``) share it.

    Returns:
        The mean loss and the logits (the "outputs" that metrics functions receive).
    """
    import torch.nn.functional as F

    x, y = batch
    logits = model(x)
    # Under autocast, cross_entropy runs in fp32 whatever the logits' dtype.
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    return loss, logits


def accuracy(outputs: "torch.Tensor", batch: Any) -> "dict[str, torch.Tensor]":
    """Share of argmax predictions equal to the targets; reported as ``val_accuracy``."""
    _, y = batch
    return {"accuracy": (outputs.argmax(dim=-1) == y).float().mean()}


@dataclass(frozen=True)
class Workload:
    """A model, its data and how to score it, all built from the trial's config.

    Args:
        build_model: ``config -> nn.Module``. Called on every worker after seeding with
            ``config["seed"]``; DistributedDataParallel then makes rank 0's weights everyone's.
        build_data: ``config -> (train_set, val_set)``. Called on every worker; each worker
            trains on its own shard of ``train_set`` and evaluates on its shard of ``val_set``.
        loss: ``(model, batch) -> loss`` or ``(model, batch) -> (loss, outputs)``, with
            ``loss`` the mean over the batch. Runs under autocast on the training device.
            Defaults to :func:`cross_entropy` on ``(x, y)`` batches.
        metrics: ``(outputs, batch) -> {name: value}``, evaluated on held-out batches only.
            Values are means over the batch (tensors or floats); the loop averages them over
            the held-out set weighting by batch size and reports them as ``val_<name>``.
            ``outputs`` is the second element of what ``loss`` returned.
        description: One line for listings: data, model size, cost of an epoch.
        defaults: Workload-specific config keys and their default values, for
            documentation and for ``hpsearch trial`` to show; ``build_*`` still read
            ``config.get(key, default)`` themselves.
    """

    build_model: Callable[[dict], "nn.Module"]
    build_data: Callable[[dict], "tuple[Dataset, Dataset]"]
    loss: Callable[["nn.Module", Any], LossOutput] | None = None
    metrics: Callable[[Any, Any], "Mapping[str, torch.Tensor | float]"] | None = None
    description: str = ""
    defaults: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        for name in ("build_model", "build_data"):
            if not callable(getattr(self, name)):
                raise TypeError(f"Workload.{name}: must be callable (got {getattr(self, name)!r})")
        for name in ("loss", "metrics"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"Workload.{name}: must be callable or None (got {value!r})")

    def compute_loss(self, model: "nn.Module", batch: Any) -> "tuple[torch.Tensor, Any]":
        """``(loss, outputs)`` whichever form ``loss`` returns."""
        out = (self.loss or cross_entropy)(model, batch)
        if isinstance(out, tuple):
            return out[0], out[1]
        return out, None
