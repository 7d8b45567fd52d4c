"""The training loop: one code path for 1 CPU process, N CPU processes (gloo) and N GPUs (NCCL).

:func:`train` reads top to bottom like nanoGPT's ``train.py``: build, maybe resume, then
step, and at report points evaluate, checkpoint and report through the :class:`Session`.
It never imports Ray; when ``torch.distributed`` is initialised with more than one process
(Ray Train does that before calling it) the model is wrapped in DistributedDataParallel and
every worker trains on its own shard of each epoch.

Config keys the loop reads (all others are passed through to the workload untouched):

============================  =============================================================
``lr``                        Peak learning rate. Required, > 0.
``warmup_steps``              Linear warmup length in optimizer steps. Default 0.
``min_lr``                    Floor of the cosine decay. Default ``lr / 10``.
``precision``                 ``fp32`` | ``bf16`` | ``fp16``. Default ``fp32``. bf16 and fp16
                              run the forward pass under autocast; fp16 adds a GradScaler.
``weight_decay``              AdamW decoupled weight decay on matrices and embeddings (biases
                              and norm weights, any parameter with < 2 dims, get none).
                              Default 0.0.
``beta1``, ``beta2``          AdamW betas. Default 0.9, 0.999.
``batch_size``                Global batch size across workers. Default 64. Each worker
                              takes ``batch_size // world_size`` samples per step.
``grad_clip``                 Max global gradient norm; 0 disables clipping. Default 1.0.
``epochs``                    Budget in epochs (passes over the training set, or what the
                              workload calls an epoch).
``max_steps``                 Budget in optimizer steps. At least one of ``epochs`` and
                              ``max_steps`` is required; with both, the earlier end wins.
                              The cosine reaches ``min_lr`` at the end of the budget.
``eval_every``                Evaluate and report every this many steps. Default: at the end
                              of every epoch. The end of the budget always reports.
``log_every``                 Also record the training metrics (no evaluation) every this
                              many steps: ``train_loss``, ``lr``, ``grad_norm``,
                              ``samples_per_s``, ``peak_mem_mb``. They ride along with the
                              next report as ``train_log`` (a list of dicts, each with
                              ``age_s``: seconds before that report); reports and ASHA's
                              decisions stay where they are. Default: none.
``eval_batch_size``           Per-worker batch size for evaluation. Default: the training
                              per-worker batch size.
``seed``                      Seeds model init, data order and every generator. Default 0.
``loss_scale_init``           Initial fp16 loss scale (GradScaler ``init_scale``). Default 2**16.
``checkpoint_every``          Checkpoint at every this many reports (and always at the last
                              one); 0 never checkpoints. Default 1.
``diverge_factor``            A run whose mean training loss (over a window of steps, or
                              since the last report) is more than this many times the loss
                              of its first step is ``diverged``. 0 turns the rule off; it
                              applies only when the first loss is positive. Default 10.
``diverge_window``            Steps between divergence checks (one device sync each).
                              Default 32.
``num_workers``               DataLoader worker processes for datasets that are neither a
                              ``TensorDataset`` nor have ``get_batch``. Default 0.
``use_gpu``                   Train on ``cuda:<local_rank>`` when CUDA is available. Default False.
============================  =============================================================

Each report (one ``session.report`` call, made by every rank with the same values) holds:

``step``          optimizer steps done (int; steps the fp16 scaler skipped count too);
``epoch``         epochs done: an int when the report falls on an epoch boundary (ASHA
                  milestones at integer epochs see exactly ``1, 2, ...``), a float such as
                  ``2.5`` for a report in the middle of the third epoch;
``lr``            learning rate of the last step;
``train_loss``    mean training loss over the steps since the previous report, all ranks;
``val_loss``      mean held-out loss; workload metrics follow as ``val_<name>``;
``grad_norm``     global gradient norm of the last step, before clipping;
``samples_per_s`` training samples per second since the previous report, all workers
                  together, evaluation and checkpointing excluded;
``peak_mem_mb``   peak accelerator memory allocated so far (None on the CPU);
``precision``     the precision trained in;
``skipped_steps`` steps the fp16 scaler skipped so far (overflowing gradients);
``first_step_at`` wall clock (epoch seconds) when this run's first training step began
                  (after a resume: the first step after it); the trial table's
                  ``startup_s`` is measured to it;
``status``        ``running``; on the last report ``completed``, ``diverged`` (a non-finite
                  training loss, or one over ``diverge_factor`` times the first step's:
                  ``val_loss`` is NaN and training stops) or
                  ``unsupported_precision`` (the hardware cannot run ``precision``; nothing
                  trained), the latter two with a ``reason``.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

from hpsearch.train import checkpoint as ckpt
from hpsearch.train.keys import HarnessConfig
from hpsearch.train.precision import Precision, unsupported_reason
from hpsearch.train.schedule import lr_at
from hpsearch.train.session import Session
from hpsearch.train.workload import Workload

__all__ = ["train", "TrainResult", "HarnessConfig"]  # HarnessConfig lives in keys.py



@dataclass(frozen=True)
class TrainResult:
    """How a call to :func:`train` ended.

    Attributes:
        status: ``completed``, ``diverged`` or ``unsupported_precision``.
        step: Optimizer steps done.
        epoch: Epochs done (int at an epoch boundary, else float).
        metrics: The last report.
        reason: Why the run ended early (``None`` when completed).
    """

    status: str
    step: int
    epoch: float
    metrics: dict[str, Any]
    reason: str | None = None


def train(config: Mapping[str, Any], workload: Workload, session: Session) -> TrainResult:
    """Train ``workload`` with ``config``, reporting through ``session``; see the module doc.

    Call it on every worker of a run. Problems of the run itself (divergence, a precision
    the hardware lacks) end it with a final report and a :class:`TrainResult`; a broken
    config raises ``ValueError`` before anything is built.

    Example:
        >>> from hpsearch.train import LocalSession, train
        >>> from hpsearch.workloads.digits import WORKLOAD
        >>> session = LocalSession()
        >>> result = train({"lr": 3e-3, "epochs": 2}, WORKLOAD, session)
        >>> result.status, [r["epoch"] for r in session.reports]
        ('completed', [1, 2])
    """
    cfg = HarnessConfig.from_config(config)
    rank, world_size = _process_group()
    if (session.world_rank, session.world_size) != (rank, world_size):
        raise RuntimeError(
            f"session says rank {session.world_rank} of {session.world_size} but torch.distributed "
            f"says rank {rank} of {world_size}; the runner must set up the process group first"
        )
    device = _training_device(cfg.use_gpu, session)
    precision = Precision(cfg.precision, device.type)
    reason = unsupported_reason(cfg.precision, device)
    if reason is not None:
        metrics = _final_metrics(0, 0, cfg, "unsupported_precision", reason)
        session.report(metrics)
        return TrainResult("unsupported_precision", 0, 0, metrics, reason)

    per_worker_batch = cfg.batch_size // world_size
    if per_worker_batch < 1:
        raise ValueError(f"config.batch_size: must be >= the number of workers ({world_size}) (got {cfg.batch_size})")

    # Same seed on every rank for the data and the initial weights (DDP also broadcasts rank
    # 0's), then a per-rank seed so that dropout masks differ between workers.
    _seed_everything(cfg.seed)
    train_set, val_set = workload.build_data(dict(config))
    model = workload.build_model(dict(config)).to(device)
    _seed_everything(cfg.seed + rank)

    sampler = DistributedSampler(
        train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed, drop_last=True
    )
    steps_per_epoch = len(sampler) // per_worker_batch
    if steps_per_epoch == 0:
        raise ValueError(
            f"config.batch_size: {cfg.batch_size} is larger than the training set "
            f"({len(train_set)} samples over {world_size} workers); no full batch fits in an epoch"
        )
    if len(val_set) < world_size:
        raise ValueError(f"the validation set has {len(val_set)} samples, fewer than the {world_size} workers")
    total_steps = min(
        cfg.epochs * steps_per_epoch if cfg.epochs is not None else cfg.max_steps,
        cfg.max_steps if cfg.max_steps is not None else cfg.epochs * steps_per_epoch,
    )
    min_lr = cfg.min_lr if cfg.min_lr is not None else cfg.lr / 10

    def lr_for(step: int) -> float:
        return lr_at(step, lr=cfg.lr, warmup_steps=cfg.warmup_steps, total_steps=total_steps, min_lr=min_lr)

    optimizer = _adamw(model, cfg, fused=device.type == "cuda")
    scaler = precision.grad_scaler(cfg.loss_scale_init)
    autocast = precision.autocast()

    step, epoch, batch_in_epoch, reports_done = 0, 0, 0, 0
    resume_dir = session.latest_checkpoint_dir()
    if resume_dir is not None:
        state = ckpt.load(resume_dir)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scaler.is_enabled() and state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        step, epoch, batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        reports_done = state["reports"]
        rng_states = state["rng"]
        ckpt.set_rng_state(rng_states[rank] if rank < len(rng_states) else rng_states[0], device)

    train_model: nn.Module = model
    if world_size > 1:
        train_model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    params = [p for p in model.parameters() if p.requires_grad]
    batches_of = _batch_source(device, cfg.num_workers)
    eval_batch = cfg.eval_batch_size or per_worker_batch

    def evaluate() -> dict[str, float]:
        return _evaluate(model, workload, val_set, batches_of, autocast, device, rank, world_size, eval_batch)

    def report(status: str, *, train_loss: float, grad_norm: float, samples_per_s: float, lr: float,
               val: Mapping[str, float], checkpoint: bool) -> dict[str, Any]:
        nonlocal reports_done
        reports_done += 1
        metrics = {
            "step": step,
            "epoch": _epochs_done(epoch, batch_in_epoch, steps_per_epoch),
            "lr": lr,
            "train_loss": train_loss,
            **val,
            "grad_norm": grad_norm,
            "samples_per_s": samples_per_s,
            "peak_mem_mb": _peak_mem_mb(device),
            "precision": cfg.precision,
            "skipped_steps": _skipped_steps(step, optimizer, scaler),
            "status": status,
            "first_step_at": first_step_at,
        }
        if log_rows:
            metrics["train_log"] = take_log()
        checkpoint_dir = None
        if checkpoint and cfg.checkpoint_every > 0:
            # Every rank's generator states go in, so a resumed DDP run redraws the same masks.
            states = _gather(ckpt.rng_state(device), world_size)
            if rank == 0:
                checkpoint_dir = ckpt.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scaler": scaler.state_dict(),
                        "step": step,
                        "epoch": epoch,
                        "batch_in_epoch": batch_in_epoch,
                        "reports": reports_done,
                        "rng": states,
                        "first_loss": first_loss,
                        "config": _plain(dict(config)),
                    }
                )
        session.report(metrics, checkpoint_dir=checkpoint_dir)
        return metrics

    log_rows: list[dict[str, Any]] = []  # log_every rows since the last report

    def take_log() -> list[dict[str, Any]]:
        now = time.perf_counter()
        rows = [{**{k: v for k, v in r.items() if k != "_at"}, "age_s": now - r["_at"]}
                for r in log_rows]
        log_rows.clear()
        return rows

    first_loss: float | None = None  # the first step's loss: what "exploded" is measured against
    first_step_at: float | None = None
    if resume_dir is not None:
        first_loss = state.get("first_loss")
    metrics: dict[str, Any] = {}
    if step >= total_steps:  # resumed from the end of the budget: report where it stands
        metrics = report("completed", train_loss=math.nan, grad_norm=math.nan, samples_per_s=0.0,
                         lr=lr_for(step - 1), val=evaluate(), checkpoint=False)
        return TrainResult("completed", step, metrics["epoch"], metrics)

    model.train()
    loss_sum = torch.zeros((), device=device)
    window_sum = torch.zeros((), device=device)  # the divergence check's window
    window_steps = 0
    steps_since_report = 0
    log_sum = torch.zeros((), device=device)  # log_every's window
    log_steps = 0
    grad_norm = torch.full((), math.nan)
    lr = cfg.lr
    started = log_started = time.perf_counter()
    while True:
        sampler.set_epoch(epoch)
        if hasattr(train_set, "set_epoch"):
            train_set.set_epoch(epoch)
        chunks = _index_chunks(sampler, per_worker_batch)[batch_in_epoch:]
        for batch in batches_of(train_set, chunks):
            if first_step_at is None:
                first_step_at = time.time()
            lr = lr_for(step)
            for group in optimizer.param_groups:
                group["lr"] = lr

            with autocast:
                loss, _ = workload.compute_loss(train_model, batch)
            scaler.scale(loss).backward()

            step += 1
            batch_in_epoch += 1
            steps_since_report += 1
            report_now = (
                step >= total_steps
                or (cfg.eval_every is not None and step % cfg.eval_every == 0)
                or (cfg.eval_every is None and batch_in_epoch == steps_per_epoch)
            )
            log_now = not report_now and cfg.log_every is not None and step % cfg.log_every == 0
            if cfg.grad_clip > 0:
                scaler.unscale_(optimizer)  # clip the true gradients, not the fp16-scaled ones
                grad_norm = nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            elif report_now or log_now:
                scaler.unscale_(optimizer)
                grad_norm = _total_norm(params)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.detach()  # stays on the device: no sync per step
            window_sum += loss.detach()
            window_steps += 1
            log_sum += loss.detach()
            log_steps += 1
            if first_loss is None:  # one sync, once: the loss before any update counted
                first_loss = _global_mean(loss.detach(), 1, world_size)

            if log_now:  # one sync for the loss; the rest is already on the host
                now = time.perf_counter()
                log_loss = _global_mean(log_sum, log_steps, world_size)
                reason = _divergence(log_loss, first_loss, cfg, step - log_steps + 1, step)
                if reason:  # checked as a window's loss would be: it is on the host already
                    return _diverge(session, step, epoch, batch_in_epoch, steps_per_epoch, cfg, lr, optimizer,
                                    scaler, log_loss, metrics, reason, take_log())
                log_rows.append({
                    "step": step, "epoch": _epochs_done(epoch, batch_in_epoch, steps_per_epoch),
                    "lr": lr, "train_loss": log_loss, "grad_norm": float(grad_norm),
                    "samples_per_s": log_steps * per_worker_batch * world_size / max(now - log_started, 1e-9),
                    "peak_mem_mb": _peak_mem_mb(device), "_at": now,
                })
                log_sum.zero_()
                log_steps, log_started = 0, now
            if not report_now:
                if step % cfg.diverge_window == 0:  # one sync per window
                    window_loss = _global_mean(window_sum, window_steps, world_size)
                    reason = _divergence(window_loss, first_loss, cfg, step - window_steps + 1, step)
                    window_sum.zero_()
                    window_steps = 0
                    if reason:
                        return _diverge(session, step, epoch, batch_in_epoch, steps_per_epoch, cfg, lr, optimizer,
                                        scaler, window_loss, metrics, reason, take_log())
                continue

            train_loss = _global_mean(loss_sum, steps_since_report, world_size)  # syncs the device
            elapsed = time.perf_counter() - started
            reason = _divergence(train_loss, first_loss, cfg, step - steps_since_report + 1, step)
            if reason:
                return _diverge(session, step, epoch, batch_in_epoch, steps_per_epoch, cfg, lr, optimizer,
                                scaler, train_loss, metrics, reason, take_log())
            done = step >= total_steps
            metrics = report(
                "completed" if done else "running",
                train_loss=train_loss,
                grad_norm=float(grad_norm),
                samples_per_s=steps_since_report * per_worker_batch * world_size / max(elapsed, 1e-9),
                lr=lr,
                val=evaluate(),
                checkpoint=cfg.checkpoint_every > 0 and (done or (reports_done + 1) % cfg.checkpoint_every == 0),
            )
            if done:
                return TrainResult("completed", step, metrics["epoch"], metrics)
            loss_sum.zero_()
            log_sum.zero_()
            log_steps, log_started = 0, time.perf_counter()
            if step % cfg.diverge_window == 0:  # this report's check covered the window
                window_sum.zero_()
                window_steps = 0
            steps_since_report = 0
            started = time.perf_counter()
        epoch += 1
        batch_in_epoch = 0


def _divergence(loss: float, first_loss: float | None, cfg: HarnessConfig, first_step: int,
                last_step: int) -> str | None:
    """Why the run diverged, or ``None``: a non-finite mean training loss, or one more than
    ``diverge_factor`` times the first step's loss (when that was positive)."""
    if not math.isfinite(loss):
        return f"training loss became non-finite ({loss}) by step {last_step}"
    if (cfg.diverge_factor > 0 and first_loss is not None and math.isfinite(first_loss)
            and first_loss > 0 and loss > cfg.diverge_factor * first_loss):
        return (f"training loss exploded: {loss:.4g} over steps {first_step}-{last_step} is more "
                f"than {cfg.diverge_factor:g}x its first value {first_loss:.4g} "
                "(diverge_factor)")
    return None


def _diverge(session: Session, step: int, epoch: int, batch_in_epoch: int, steps_per_epoch: int,
             cfg: HarnessConfig, lr: float, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
             train_loss: float, previous: Mapping[str, Any], reason: str,
             log: list[dict[str, Any]]) -> TrainResult:
    done = _epochs_done(epoch, batch_in_epoch, steps_per_epoch)
    metrics = _final_metrics(step, done, cfg, "diverged", reason)
    metrics.update(lr=lr, train_loss=train_loss, skipped_steps=_skipped_steps(step, optimizer, scaler))
    # The workload's metrics keep their columns, as NaN: the weights are no longer meaningful.
    metrics.update({k: math.nan for k in previous if k.startswith("val_") and k not in metrics})
    if log:
        metrics["train_log"] = log
    session.report(metrics)
    return TrainResult("diverged", step, done, metrics, reason)


def _final_metrics(step: int, epoch: float, cfg: HarnessConfig, status: str, reason: str) -> dict[str, Any]:
    """A report for a run that ends without a real evaluation: the numbers are NaN."""
    return {
        "step": step,
        "epoch": epoch,
        "lr": math.nan,
        "train_loss": math.nan,
        "val_loss": math.nan,
        "grad_norm": math.nan,
        "samples_per_s": 0.0,
        "peak_mem_mb": None,
        "precision": cfg.precision,
        "skipped_steps": 0,
        "status": status,
        "reason": reason,
    }


# --- building blocks -------------------------------------------------------------------


def _process_group() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _training_device(use_gpu: bool, session: Session) -> torch.device:
    if use_gpu and torch.cuda.is_available():
        # The runner may know this worker's GPU better than its local rank does (Ray Train
        # shows a node's workers all their GPUs; workers sharing a GPU share its index).
        index = getattr(session, "device_index", None)
        device = torch.device("cuda", session.local_rank if index is None else index)
        torch.cuda.set_device(device)
        # peak_mem_mb is this run's own, also in a process that trained before (Tune reuses
        # the actors of one-worker trials).
        torch.cuda.reset_peak_memory_stats(device)
        return device
    return torch.device("cpu")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _adamw(model: nn.Module, cfg: HarnessConfig, *, fused: bool) -> torch.optim.AdamW:
    # Matrices and embeddings decay; biases and norm gains (fewer than 2 dims) do not.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused or None)


def _index_chunks(sampler: DistributedSampler, batch_size: int) -> list[torch.Tensor]:
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


def _batch_source(device: torch.device, num_workers: int):
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
                yield batch if on_cpu else _to_device(batch, device)
        elif hasattr(dataset, "get_batch"):
            for idx in chunks:
                batch = dataset.get_batch(idx)
                yield batch if on_cpu else _to_device(batch, device)
        else:
            loader = DataLoader(
                dataset,
                batch_sampler=[idx.tolist() for idx in chunks],
                num_workers=num_workers,
                pin_memory=not on_cpu,
            )
            for batch in loader:
                yield batch if on_cpu else _to_device(batch, device)

    return batches


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


@torch.no_grad()
def _evaluate(model: nn.Module, workload: Workload, val_set: Dataset, batches_of, autocast, device: torch.device,
              rank: int, world_size: int, batch_size: int) -> dict[str, float]:
    """Held-out loss and metrics, averaged over samples across all ranks.

    Runs on the unwrapped model: ranks may see different numbers of batches, and the DDP
    wrapper's forward could try to sync buffers with ranks that have already finished.
    """
    model.eval()
    chunks = list(torch.arange(rank, len(val_set), world_size).split(batch_size))
    loss_sum = torch.zeros((), device=device)
    sums: dict[str, torch.Tensor] = {}
    count = 0
    for idx, batch in zip(chunks, batches_of(val_set, chunks)):
        with autocast:
            loss, outputs = workload.compute_loss(model, batch)
        n = len(idx)
        loss_sum += loss.detach().float() * n
        if workload.metrics is not None:
            for name, value in workload.metrics(outputs, batch).items():
                value = torch.as_tensor(value, device=device).detach().float() * n
                sums[name] = sums[name] + value if name in sums else value
        count += n
    model.train()
    totals = torch.stack([loss_sum, *sums.values(), torch.tensor(float(count), device=device)])
    if world_size > 1:
        dist.all_reduce(totals)
    totals = (totals[:-1] / totals[-1]).tolist()
    return {"val_loss": totals[0], **{f"val_{name}": v for name, v in zip(sums, totals[1:])}}


def _global_mean(loss_sum: torch.Tensor, steps: int, world_size: int) -> float:
    total = loss_sum.detach().clone()
    if world_size > 1:
        dist.all_reduce(total)
    return total.item() / (steps * world_size)


def _total_norm(params: list[nn.Parameter]) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))


def _skipped_steps(step: int, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> int:
    """Steps the fp16 scaler skipped: AdamW counts only the steps it really took."""
    if not scaler.is_enabled():
        return 0
    taken = max((float(s["step"]) for s in optimizer.state.values() if "step" in s), default=0.0)
    return step - int(taken)


def _epochs_done(epoch: int, batch_in_epoch: int, steps_per_epoch: int) -> float:
    if batch_in_epoch == 0:
        return epoch
    if batch_in_epoch >= steps_per_epoch:
        return epoch + 1
    return epoch + batch_in_epoch / steps_per_epoch


def _peak_mem_mb(device: torch.device) -> float | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return None


def _gather(obj: Any, world_size: int) -> list[Any]:
    if world_size == 1:
        return [obj]
    out: list[Any] = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def _plain(value: Any) -> Any:
    """Config values as types ``torch.load(weights_only=True)`` accepts."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):  # before float: np.float64 is a float subclass
        return value.item()
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return repr(value)
