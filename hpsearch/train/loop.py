"""The training loop: one code path for 1 CPU process, N CPU processes (gloo) and N GPUs (NCCL).

:func:`train` reads top to bottom like nanoGPT's ``train.py``: build, maybe resume, then
step, and at the points the config names check, log and report through the
:class:`~hpsearch.train.session.Session`. It never imports Ray; when ``torch.distributed``
is initialised with more than one process (Ray Train does that before calling it) the
model is wrapped in DistributedDataParallel and every worker trains on its own shard of
each epoch. The config keys it reads are documented in ``docs/harness.md`` and checked by
:class:`~hpsearch.train.keys.HarnessConfig`; all others go to the workload untouched.

Each report (one ``session.report`` call, made by every rank with the same values) holds
``step``, ``epoch`` (an int at an epoch boundary), ``lr``, ``train_loss``, ``val_loss`` and
the workload's ``val_<name>`` metrics, ``grad_norm``, ``samples_per_s``, ``peak_mem_mb``,
``gpu_util_pct``, ``precision``, ``fp32_matmul``, ``skipped_steps``, ``first_step_at`` and ``status``
(``running``; on the last report ``completed``, ``diverged`` or ``unsupported_precision``, the latter two with a
``reason``): ``docs/harness.md``, Reports, says what each means.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch import nn
from torch.utils.data import DistributedSampler

from hpsearch.train import checkpoint as ckpt
from hpsearch.train.batches import batch_source, epochs_done, index_chunks
from hpsearch.train.devices import (FIRST_COLLECTIVE_S, first_collective, gather, global_mean,
                                    peak_mem_mb, process_group, seed_everything, training_device)
from hpsearch.train.evaluate import evaluate
from hpsearch.train.keys import HarnessConfig
from hpsearch.train.optim import adamw, skipped_steps, total_norm
from hpsearch.train.precision import Precision, unsupported_reason
from hpsearch.train.schedule import lr_at
from hpsearch.train.session import Session
from hpsearch.train.utilization import gpu_util_pct, utilization_sampler
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
    rank, world = process_group()
    if (session.world_rank, session.world_size) != (rank, world):
        raise RuntimeError(
            f"session says rank {session.world_rank} of {session.world_size} but torch.distributed "
            f"says rank {rank} of {world}; the runner must set up the process group first")
    device = training_device(cfg.use_gpu, session)
    guard = getattr(session, "first_collective_s", None) or FIRST_COLLECTIVE_S
    first_collective(device, world, within_s=guard)  # a group that cannot talk fails now
    Precision(cfg.precision, device.type).apply()  # every trial: the flags are process-wide
    reason = unsupported_reason(cfg.precision, device)
    if reason is not None:
        metrics = _final_metrics(0, 0, cfg, "unsupported_precision", reason)
        session.report(metrics)
        return TrainResult("unsupported_precision", 0, 0, metrics, reason)
    run = _build(cfg, config, workload, session, device, rank, world)
    progress = _resume(run)
    if world > 1:
        run.train_model = nn.parallel.DistributedDataParallel(
            run.model, device_ids=[device.index] if device.type == "cuda" else None)
    if progress.step >= run.total_steps:  # resumed from the end: report where it stands
        progress.lr = run.lr_for(progress.step - 1)
        metrics = _report(run, progress, "completed", train_loss=math.nan, samples_per_s=0.0,
                          checkpoint=False)
        return TrainResult("completed", progress.step, metrics["epoch"], metrics)
    with utilization_sampler(device) as run.gpu_util:  # None on the CPU
        return _loop(run, progress)


# --- what a run is made of ------------------------------------------------------------------


@dataclass
class _Run:
    """Everything built once for a run: data, model, optimizer, precision, schedule."""

    cfg: HarnessConfig
    config: Mapping[str, Any]
    workload: Workload
    session: Session
    device: torch.device
    rank: int
    world: int
    per_worker_batch: int
    train_set: Any
    val_set: Any
    sampler: DistributedSampler
    steps_per_epoch: int
    total_steps: int
    lr_for: Callable[[int], float]
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    autocast: Any
    batches_of: Callable
    train_model: nn.Module = None  # the DDP wrapper when world > 1
    gpu_util: Any = None  # the UtilSampler of this rank's GPU while the loop runs

    def __post_init__(self) -> None:
        self.train_model = self.model
        self.params = [p for p in self.model.parameters() if p.requires_grad]

    def evaluate(self) -> dict[str, float]:
        return evaluate(self.model, self.workload, self.val_set, self.batches_of, self.autocast,
                        self.device, self.rank, self.world,
                        self.cfg.eval_batch_size or self.per_worker_batch)


def _build(cfg: HarnessConfig, config: Mapping[str, Any], workload: Workload, session: Session,
           device: torch.device, rank: int, world: int) -> _Run:
    per_worker_batch = cfg.batch_size // world
    if per_worker_batch < 1:
        raise ValueError(f"config.batch_size: must be >= the number of workers ({world}) "
                         f"(got {cfg.batch_size})")
    # Same seed on every rank for the data and the initial weights (DDP also broadcasts rank
    # 0's), then a per-rank seed so that dropout masks differ between workers.
    seed_everything(cfg.seed)
    train_set, val_set = workload.build_data(dict(config))
    model = workload.build_model(dict(config)).to(device)
    seed_everything(cfg.seed + rank)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True,
                                 seed=cfg.seed, drop_last=True)
    steps_per_epoch = len(sampler) // per_worker_batch
    if steps_per_epoch == 0:
        raise ValueError(
            f"config.batch_size: {cfg.batch_size} is larger than the training set "
            f"({len(train_set)} samples over {world} workers); no full batch fits in an epoch")
    if len(val_set) < world:
        raise ValueError(f"the validation set has {len(val_set)} samples, fewer than the "
                         f"{world} workers")
    by_epochs = cfg.epochs * steps_per_epoch if cfg.epochs is not None else None
    total_steps = min(s for s in (by_epochs, cfg.max_steps) if s is not None)
    min_lr = cfg.min_lr if cfg.min_lr is not None else cfg.lr / 10
    precision = Precision(cfg.precision, device.type)
    return _Run(
        cfg=cfg, config=config, workload=workload, session=session, device=device, rank=rank,
        world=world, per_worker_batch=per_worker_batch, train_set=train_set, val_set=val_set,
        sampler=sampler, steps_per_epoch=steps_per_epoch, total_steps=total_steps,
        lr_for=lambda step: lr_at(step, lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                                  total_steps=total_steps, min_lr=min_lr),
        model=model, optimizer=adamw(model, cfg, fused=device.type == "cuda"),
        scaler=precision.grad_scaler(cfg.loss_scale_init), autocast=precision.autocast(),
        batches_of=batch_source(device, cfg.num_workers))


# --- where a run stands ------------------------------------------------------------------------


@dataclass
class _Window:
    """The summed training loss over some steps, kept on the device (no sync per step)."""

    loss: torch.Tensor
    steps: int = 0
    started: float = field(default_factory=time.perf_counter)

    def mean(self, world: int) -> float:
        """The mean over every rank's steps: one sync."""
        return global_mean(self.loss, self.steps, world)

    def reset(self) -> None:
        self.loss.zero_()
        self.steps = 0
        self.started = time.perf_counter()


@dataclass
class _Progress:
    """Where the run stands: the counters a checkpoint saves, and the loss windows."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    reports: int = 0
    first_loss: float | None = None  # the first step's: what "exploded" is measured against
    first_step_at: float | None = None
    lr: float = math.nan
    grad_norm: torch.Tensor = field(default_factory=lambda: torch.full((), math.nan))
    last: dict[str, Any] = field(default_factory=dict)  # the last report
    log_rows: list[dict[str, Any]] = field(default_factory=list)  # log_every rows since it
    windows: dict[str, _Window] = field(default_factory=dict)  # report, window, log
    window_list: tuple[_Window, ...] = ()

    def start_windows(self, device: torch.device) -> None:
        self.windows = {k: _Window(torch.zeros((), device=device))
                        for k in ("report", "window", "log")}
        self.window_list = tuple(self.windows.values())

    def take_log(self) -> list[dict[str, Any]]:
        now = time.perf_counter()
        rows = [{**{k: v for k, v in r.items() if k != "_at"}, "age_s": now - r["_at"]}
                for r in self.log_rows]
        self.log_rows.clear()
        return rows


def _resume(run: _Run) -> _Progress:
    """A fresh start, or where the newest checkpoint left off."""
    progress = _Progress(lr=run.cfg.lr)
    resume_dir = run.session.latest_checkpoint_dir()
    if resume_dir is None:
        return progress
    state = ckpt.load(resume_dir)
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    if run.scaler.is_enabled() and state.get("scaler"):
        run.scaler.load_state_dict(state["scaler"])
    progress.step, progress.epoch = state["step"], state["epoch"]
    progress.batch_in_epoch, progress.reports = state["batch_in_epoch"], state["reports"]
    progress.first_loss = state.get("first_loss")
    rng_states = state["rng"]
    ckpt.set_rng_state(rng_states[run.rank] if run.rank < len(rng_states) else rng_states[0],
                       run.device)
    return progress


# --- the loop ---------------------------------------------------------------------------------


def _loop(run: _Run, progress: _Progress) -> TrainResult:
    """Step through the epochs; at each point the config names (:func:`_points`) the one
    divergence check, then a log row, the end of a check window, or a report."""
    run.model.train()
    progress.start_windows(run.device)
    while True:
        run.sampler.set_epoch(progress.epoch)
        if hasattr(run.train_set, "set_epoch"):
            run.train_set.set_epoch(progress.epoch)
        chunks = index_chunks(run.sampler, run.per_worker_batch)[progress.batch_in_epoch:]
        for batch in run.batches_of(run.train_set, chunks):
            for point in _step(run, progress, batch):
                ended = _at(run, progress, point)
                if ended is not None:
                    return ended
        progress.epoch += 1
        progress.batch_in_epoch = 0


def _points(run: _Run, step: int, batch_in_epoch: int) -> tuple[str, ...]:
    """What happens after optimizer step ``step``: a report (the end of the budget, every
    ``eval_every`` steps, or else each epoch's end), else a log row (``log_every``) and the
    end of a divergence-check window (``diverge_window``), each of them optional."""
    cfg = run.cfg
    if (step >= run.total_steps or (cfg.eval_every is not None and step % cfg.eval_every == 0)
            or (cfg.eval_every is None and batch_in_epoch == run.steps_per_epoch)):
        return ("report",)
    log = cfg.log_every is not None and step % cfg.log_every == 0
    return ("log",) * log + ("window",) * (step % cfg.diverge_window == 0)


def _step(run: _Run, progress: _Progress, batch: Any) -> tuple[str, ...]:
    """One optimizer step; returns the points that follow it."""
    if progress.first_step_at is None:
        progress.first_step_at = time.time()
    progress.lr = run.lr_for(progress.step)
    for group in run.optimizer.param_groups:
        group["lr"] = progress.lr
    with run.autocast:
        loss, _ = run.workload.compute_loss(run.train_model, batch)
    run.scaler.scale(loss).backward()
    progress.step += 1
    progress.batch_in_epoch += 1
    points = _points(run, progress.step, progress.batch_in_epoch)
    if run.cfg.grad_clip > 0:
        run.scaler.unscale_(run.optimizer)  # clip the true gradients, not the fp16-scaled ones
        progress.grad_norm = nn.utils.clip_grad_norm_(run.params, run.cfg.grad_clip)
    elif "report" in points or "log" in points:
        run.scaler.unscale_(run.optimizer)
        progress.grad_norm = total_norm(run.params)
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.optimizer.zero_grad(set_to_none=True)
    loss = loss.detach()
    for window in progress.window_list:  # the sums stay on the device: no sync per step
        window.loss += loss
        window.steps += 1
    if progress.first_loss is None:  # one sync, once: the loss before any update counted
        progress.first_loss = global_mean(loss, 1, run.world)
    return points


def _at(run: _Run, progress: _Progress, point: str) -> TrainResult | None:
    """One point after a step: the divergence check on its window's mean loss (one sync),
    then what the point is for. Returns the run's end, if this is it."""
    window = progress.windows[point]
    now = time.perf_counter()
    loss = window.mean(run.world)
    reason = _divergence(loss, progress.first_loss, run.cfg, progress.step - window.steps + 1,
                         progress.step)
    if reason:
        return _diverge(run, progress, loss, reason)
    if point == "log":
        progress.log_rows.append({
            "step": progress.step,
            "epoch": epochs_done(progress.epoch, progress.batch_in_epoch, run.steps_per_epoch),
            "lr": progress.lr, "train_loss": loss, "grad_norm": float(progress.grad_norm),
            "samples_per_s": window.steps * run.per_worker_batch * run.world
            / max(now - window.started, 1e-9), "_at": now, "peak_mem_mb": peak_mem_mb(run.device),
            "gpu_util_pct": gpu_util_pct(run.gpu_util, window.started, run.device)})
    if point != "report":
        window.reset()
        return None
    done = progress.step >= run.total_steps
    every = run.cfg.checkpoint_every
    elapsed = time.perf_counter() - window.started
    metrics = _report(
        run, progress, "completed" if done else "running", train_loss=loss,
        samples_per_s=window.steps * run.per_worker_batch * run.world / max(elapsed, 1e-9),
        checkpoint=every > 0 and (done or (progress.reports + 1) % every == 0), since=window.started)
    if done:
        return TrainResult("completed", progress.step, metrics["epoch"], metrics)
    window.reset()
    progress.windows["log"].reset()
    if progress.step % run.cfg.diverge_window == 0:  # this report's check covered it
        progress.windows["window"].reset()
    return None


def _report(run: _Run, progress: _Progress, status: str, *, train_loss: float,
            samples_per_s: float, checkpoint: bool, since: float = 0.0) -> dict[str, Any]:
    """Evaluate, maybe checkpoint, and report through the session (every rank)."""
    progress.reports += 1  # the GPUs' use over the training window, before evaluating:
    busy = gpu_util_pct(run.gpu_util, since, run.device, run.world, forget=True)
    metrics = {
        "step": progress.step,
        "epoch": epochs_done(progress.epoch, progress.batch_in_epoch, run.steps_per_epoch),
        "lr": progress.lr,
        "train_loss": train_loss,
        **run.evaluate(),
        "grad_norm": float(progress.grad_norm),
        "samples_per_s": samples_per_s,
        "peak_mem_mb": peak_mem_mb(run.device, run.world),  # every rank's most
        "gpu_util_pct": busy,  # the ranks' mean
        "precision": run.cfg.precision,
        "fp32_matmul": "tf32" if Precision(run.cfg.precision, run.device.type).tf32 else "ieee",
        "skipped_steps": skipped_steps(progress.step, run.optimizer, run.scaler),
        "status": status,
        "first_step_at": progress.first_step_at,
    }
    if progress.log_rows:
        metrics["train_log"] = progress.take_log()
    checkpoint_dir = _checkpoint(run, progress) if checkpoint and run.cfg.checkpoint_every > 0 \
        else None
    run.session.report(metrics, checkpoint_dir=checkpoint_dir)
    progress.last = metrics
    return metrics


def _checkpoint(run: _Run, progress: _Progress) -> str | None:
    """Rank 0 writes the checkpoint: one dict, every rank's generator states in it, so a
    resumed DDP run redraws the same masks (a collective: every rank calls it)."""
    states = gather(ckpt.rng_state(run.device), run.world)
    if run.rank != 0:
        return None
    return ckpt.save({
        "model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
        "scaler": run.scaler.state_dict(), "step": progress.step, "epoch": progress.epoch,
        "batch_in_epoch": progress.batch_in_epoch, "reports": progress.reports, "rng": states,
        "first_loss": progress.first_loss, "config": ckpt.plain(dict(run.config)),
    })


# --- how a run ends early ----------------------------------------------------------------------


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


def _diverge(run: _Run, progress: _Progress, train_loss: float, reason: str) -> TrainResult:
    done = epochs_done(progress.epoch, progress.batch_in_epoch, run.steps_per_epoch)
    metrics = _final_metrics(progress.step, done, run.cfg, "diverged", reason)
    metrics.update(lr=progress.lr, train_loss=train_loss,
                   skipped_steps=skipped_steps(progress.step, run.optimizer, run.scaler))
    # The workload's metrics keep their columns, as NaN: the weights are no longer meaningful.
    metrics.update({k: math.nan for k in progress.last
                    if k.startswith("val_") and k not in metrics})
    log = progress.take_log()
    if log:
        metrics["train_log"] = log
    run.session.report(metrics)
    return TrainResult("diverged", progress.step, done, metrics, reason)


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
        "gpu_util_pct": None,
        "precision": cfg.precision,
        "skipped_steps": 0,
        "status": status,
        "reason": reason,
    }
