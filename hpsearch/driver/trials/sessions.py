"""The harness's sessions under Ray: where a trial's reports and checkpoints go.

:func:`hpsearch.train.loop.train` reports through a ``Session``
(:mod:`hpsearch.train.session`). Under Ray there are three:

* :class:`TuneSession`: a one-worker trial inside its Tune trial's actor; reports go to
  Tune, checkpoints to the trial's :class:`~hpsearch.driver.trials.checkpoints.CheckpointStore`;
* :class:`TrainSession`: a worker of a Ray Train run; reports and checkpoints go to Ray
  Train, which forwards rank 0's to Tune (:func:`forward_to_tune`);
* :class:`WarmSession`: a worker of a warm group (:mod:`hpsearch.driver.trials.pool`):
  rank 0 keeps the checkpoints and hands each report to the group's host, which answers
  once Tune has taken it; every rank then leaves the trial together if Tune stopped it.
"""

from __future__ import annotations

from typing import Any, Mapping

from hpsearch.driver.trials.checkpoints import CheckpointStore, note_report
from hpsearch.driver.trials.gpus import every_workers_gpus, gpu_assignment, with_every_workers_gpus
from hpsearch.space.spec import Objective
from hpsearch.store.layout import SweepDir
from hpsearch.store.reports import sanitize_report

__all__ = ["ReportLog", "TrainSession", "TrialStopped", "TuneSession", "WarmSession",
           "forward_to_tune", "record_reports", "stop_flag"]


class TuneSession:
    """Harness session for in-process trials: metrics to Tune, checkpoints to a store."""

    world_rank = 0
    world_size = 1
    local_rank = 0

    def __init__(self, objective: Objective, store: CheckpointStore, *,
                 gpu_share: float | None = None):
        self._objective = objective
        self._store = store
        # The Tune actor itself holds the trial's GPUs; below 1, the share caps its memory.
        self._gpus, self.device_index = gpu_assignment()
        self.gpu_share = gpu_share

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        from ray import tune

        metrics = {**sanitize_report(metrics, self._objective), **self._gpus}
        if checkpoint_dir:
            note_report(checkpoint_dir, metrics)
            metrics["checkpoint_path"] = self._store.add(checkpoint_dir, int(metrics["step"]))
        tune.report(metrics)

    def latest_checkpoint_dir(self) -> str | None:
        return self._store.latest()


class TrainSession:
    """Harness session inside a Ray Train worker."""

    def __init__(self, *, first_collective_s: float | None = None) -> None:
        import ray.train

        ctx = ray.train.get_context()
        self.world_rank = ctx.get_world_rank()
        self.world_size = ctx.get_world_size()
        self.local_rank = ctx.get_local_rank()
        self._gpus, self.device_index = gpu_assignment()
        self.first_collective_s = first_collective_s
        self.on_report: Any = None  # called after each report (the trial's hang ledger)

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        import ray.train

        checkpoint = None
        if checkpoint_dir:
            note_report(checkpoint_dir, metrics)
            checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir)
        ray.train.report({**metrics, **self._gpus}, checkpoint=checkpoint)
        if self.on_report is not None:
            self.on_report()
        if checkpoint_dir:  # Train has copied it into the run's storage
            from hpsearch.train.checkpoint import discard

            discard(checkpoint_dir)

    def latest_checkpoint_dir(self) -> str | None:
        import ray.train

        checkpoint = ray.train.get_checkpoint()
        return checkpoint.to_directory() if checkpoint else None


class TrialStopped(Exception):
    """Tune stopped the trial: every rank of a warm group leaves it at the same report."""


def stop_flag(stop: bool, world: int) -> bool:
    """Rank 0's ``stop`` on every rank (a collective: every rank calls it)."""
    if world <= 1:
        return stop
    import torch
    import torch.distributed as dist

    device = "cpu"
    if dist.get_backend() == "nccl":  # NCCL moves device tensors only
        device = f"cuda:{torch.cuda.current_device()}"
    flag = torch.tensor([1 if stop else 0], dtype=torch.int32, device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


class WarmSession:
    """Harness session of one trial on a warm worker group (see the module docstring)."""

    def __init__(self, host: Any, job: Mapping[str, Any], sweep: SweepDir,
                 objective: Objective, *, keep: int, first_collective_s: float | None = None):
        import ray.train

        ctx = ray.train.get_context()
        self.world_rank = ctx.get_world_rank()
        self.world_size = ctx.get_world_size()
        self.local_rank = ctx.get_local_rank()
        self.first_collective_s = first_collective_s
        gpus, self.device_index = gpu_assignment()
        self._gpus = every_workers_gpus(gpus, self.world_size)
        self._host = host
        self._seq = job["seq"]
        self._objective = objective
        self._store = CheckpointStore(sweep, job["trial_id"], keep=keep)

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        import ray

        stop = False
        if self.world_rank == 0:
            metrics = {**sanitize_report(metrics, self._objective), **self._gpus}
            if checkpoint_dir:
                note_report(checkpoint_dir, metrics)
                metrics["checkpoint_path"] = self._store.add(checkpoint_dir, int(metrics["step"]))
            stop = ray.get(self._host.report.remote(self._seq, metrics))
        elif checkpoint_dir:
            from hpsearch.train.checkpoint import discard

            discard(checkpoint_dir)
        if stop_flag(stop, self.world_size):
            raise TrialStopped

    def latest_checkpoint_dir(self) -> str | None:
        """Rank 0's newest checkpoint, on every rank (another node's listing of the shared
        folder may be stale)."""
        from hpsearch.train.devices import from_rank0

        return from_rank0(self._store.latest() if self.world_rank == 0 else None,
                          self.world_size)


def forward_to_tune(objective: Objective) -> Any:
    """A Ray Train callback that forwards rank 0's reports to Tune, sanitised for ASHA
    and Optuna, with every worker's GPUs."""
    from ray.tune.integration.ray_train import TuneReportCallback

    class ForwardToTune(TuneReportCallback):
        def after_report(self, run_context, metrics, checkpoint):  # noqa: ANN001
            metrics = [sanitize_report(with_every_workers_gpus(metrics), objective), *metrics[1:]]
            super().after_report(run_context, metrics, checkpoint)

    return ForwardToTune()


class ReportLog:
    """Rank 0's reports of one Ray Train run, as its controller saw them (a tiny actor
    owned by the process that waits on the run: ``hpsearch trial --workers N``)."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def add(self, metrics: dict[str, Any]) -> None:
        self.reports.append(metrics)

    def since(self, n: int) -> list[dict[str, Any]]:
        return self.reports[n:]


def record_reports(log: Any) -> Any:
    """A Ray Train callback (it runs in the controller) that sends each report to ``log``,
    waiting until it is recorded."""
    import ray
    from ray.train import UserCallback

    class RecordReports(UserCallback):
        def after_report(self, run_context, metrics, checkpoint):  # noqa: ANN001
            first = with_every_workers_gpus(metrics)
            ray.get(log.add.remote({k: v for k, v in first.items() if k != "checkpoint"}))

    return RecordReports()
