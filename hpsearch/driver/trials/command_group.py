"""A multi-worker command trial as a Ray Train run: one command process per Train worker.

Ray Train places the workers (all of a trial's GPUs of a node are visible to each of its
processes there, as under ``torchrun``), restarts the group after a failure up to
``trials.max_failures`` times, and sets up no process group of its own: the script makes
its own from the ``torchrun`` variables. Rank 0 picks ``MASTER_ADDR:MASTER_PORT`` on its
node and broadcasts it (``ray.train.collective``).

Ray Train's ``report`` is a barrier every rank must join, and only rank 0's output gives
reports, so reports travel beside Ray Train: rank 0 sends each to a :class:`Relay` actor
that the Tune trial polls and forwards to Tune. When Tune stops the trial, the Tune side
says so to the relay; every worker polls it and takes its command down. The relay dies
with the Tune trial's actor (it owns it), which the workers also read as a stop.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ray.train.backend import Backend, BackendConfig

from hpsearch.errors import HpsearchError, TrialFailedError

__all__ = ["CommandBackendConfig", "Relay", "command_worker_loop", "run_group"]


class _CommandBackend(Backend):
    #: Each process sees every GPU of its node's workers and picks its own by LOCAL_RANK.
    share_cuda_visible_devices = True


class CommandBackendConfig(BackendConfig):
    """No process group (the script makes its own); CUDA devices shared as torchrun does."""

    @property
    def backend_cls(self) -> type[Backend]:
        return _CommandBackend


class Relay:
    """Rank 0's reports of one command trial, its failure, and the Tune side's stop."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []
        self.error: str | None = None
        self.stop = False

    def add(self, metrics: dict[str, Any]) -> None:
        self.reports.append(metrics)

    def fail(self, message: str) -> None:
        self.error = message

    def since(self, n: int) -> tuple[list[dict[str, Any]], str | None]:
        return self.reports[n:], self.error

    def set_stop(self) -> None:
        self.stop = True

    def stopped(self) -> bool:
        return self.stop


def command_worker_loop(payload: dict[str, Any]) -> None:
    """``train_loop_per_worker``: this worker's process of the trial's command."""
    import ray
    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    from hpsearch.command.process import run_command
    from hpsearch.driver.cluster.connect import free_port
    from hpsearch.driver.trials.command_launch import (
        QuietLimit,
        judge,
        launch_for,
        metrics_for,
        reader_for,
        torchrun_env,
    )

    runner, relay = payload["runner"], payload["relay"]
    ctx = ray.train.get_context()
    rank = ctx.get_world_rank()
    master = (ray.util.get_node_ip_address(), free_port()) if rank == 0 else None
    master = broadcast_from_rank_zero(master)
    env = torchrun_env(rank=rank, local_rank=ctx.get_local_rank(), world=ctx.get_world_size(),
                       local_world=ctx.get_local_world_size(), node_rank=ctx.get_node_rank(),
                       master=master)
    launch = launch_for(runner.spec, payload["config"], trial_id=payload["trial_id"],
                        trial_dir=payload["trial_dir"], env=env, rank=rank)
    # Rank 0's output, files and pushes are the trial's reports, so rank 0 decides the
    # trial hung; the others follow its end.
    quiet = QuietLimit(runner.spec.trials.hung_after_s if rank == 0 else None)

    def counted(found: dict[str, Any]) -> None:
        quiet.reported()
        relay.add.remote(found)

    reader = metrics_for(runner.spec, payload["trial_dir"], counted) \
        if rank == 0 else reader_for(runner.spec)

    def on_line(line: str) -> None:
        if rank == 0:
            reader.on_line(line)

    def should_stop() -> bool:
        if rank == 0:
            reader.poll()
        if quiet.exceeded():
            return True
        try:
            return ray.get(relay.stopped.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - the relay (so the Tune trial) is gone
            return True

    finished = run_command(launch, on_line, should_stop=should_stop)
    if rank == 0 and finished.code is not None:
        reader.finish()
    try:
        if rank == 0:
            judge(runner.spec, finished, reader, launch.argv[0], quiet, launch.resume)
        elif finished.code:
            judge(runner.spec, finished, reader, f"{launch.argv[0]} (rank {rank})")
    except HpsearchError as exc:
        ray.get(relay.fail.remote(str(exc)))
        raise


def run_group(runner: Any, config: dict[str, Any], *, trial_id: str, trial_dir: str,
              report: Callable[[dict[str, Any]], None], storage: str) -> None:
    """Run the trial's Ray Train run, forwarding rank 0's reports to ``report`` as they
    come; whatever ``report`` raises (Tune stopped the trial) stops every worker."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    res = runner.spec.resources
    relay = ray.remote(num_cpus=0)(Relay).remote()
    trainer = DataParallelTrainer(
        command_worker_loop,
        train_loop_config={"runner": runner, "relay": relay, "config": config,
                           "trial_id": trial_id, "trial_dir": trial_dir},
        backend_config=CommandBackendConfig(),
        scaling_config=ScalingConfig(num_workers=runner.n_workers, use_gpu=res.use_gpu,
                                     resources_per_worker=res.per_worker(),
                                     placement_strategy=runner.placement),
        run_config=RunConfig(name=f"train-{trial_id}", storage_path=storage,
                             failure_config=FailureConfig(
                                 max_failures=runner.spec.trials.max_failures,
                                 controller_failure_limit=1)))
    outcome: dict[str, BaseException] = {}

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as exc:  # noqa: BLE001 - raised below, in the trial's thread
            outcome["error"] = exc

    thread = threading.Thread(target=fit, name="hpsearch-command-group", daemon=True)
    thread.start()
    seen, error = 0, None
    try:
        while True:
            thread.join(timeout=0.5)
            reports, error = ray.get(relay.since.remote(seen))
            for metrics in reports:
                seen += 1
                report(metrics)
            if not thread.is_alive():
                break
    except BaseException:
        ray.get(relay.set_stop.remote())
        thread.join(timeout=runner.spec.command.stop_grace_s + 30)
        raise
    if "error" in outcome:
        if error:
            raise TrialFailedError(error) from None
        raise outcome["error"]
