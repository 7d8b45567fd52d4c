"""How a trial runs: in the Tune trial's own process, or as a Ray Train worker group.

:func:`resolve_runner` decides once per sweep (and once per ``hpsearch trial``), and is
the one place the driver imports the user's trainable:

* :class:`InProcessRunner`, for one-worker harness trials: the harness trains inside the
  Tune trial's actor. No worker group, no process group, no second actor, and Tune reuses
  the actor for the next trial: start-up drops from tens of seconds to a fraction of one
  (``benchmarks/trial_startup.py``).
* :class:`WarmRunner`, for several harness workers (the default,
  ``resources.warm_workers: true``): each trial slot keeps one Ray Train worker group that
  trains trial after trial; the Tune trial only relays its reports
  (:mod:`hpsearch.driver.warm`). Start-up drops from ~15 s to under a second once a slot's
  group is up.
* :class:`TrainRunner`, for a raw ``train_loop_per_worker`` or ``warm_workers: false``:
  the Tune trial builds a ``TorchTrainer`` (Ray Train V2) and forwards rank 0's reports to
  Tune with a ``TuneReportCallback`` so ASHA can stop it mid-training.

A runner knows the resources its Tune trial holds, whether Tune may reuse its actor, how
often Tune retries it, how to run one configuration and where its checkpoints live. This module
and :mod:`hpsearch.driver.warm` are the only ones that import ``ray.train``.

GPUs: each worker trains on the GPU Ray assigned to it (:func:`cuda_device_index`), and
its reports carry that assignment (``gpu_ids``, ``cuda_visible_devices``; every worker's,
joined in rank order) into the history table. Under ``HPSEARCH_SIMULATE_GPU=1`` (tests
only, read where the runner is built) Ray still reserves and assigns the GPUs, but the
harness trains on the CPU and several workers talk over gloo.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

from hpsearch.driver.preflight import simulating_gpus
from hpsearch.errors import TrainableError
from hpsearch.space.spec import Objective, Spec
from hpsearch.store.layout import SweepDir
from hpsearch.store.records import sanitize_report
from hpsearch.workloads.resolve import is_harness_workload, load_trainable

__all__ = ["GPU_KEYS", "CheckpointStore", "InProcessRunner", "Runner", "TrainRunner", "WarmRunner",
           "cuda_device_index", "require_cuda_if_asked", "resolve_runner"]

# The Tune trial that drives a Ray Train run only waits on it, so it reserves no CPU (a
# fraction would make two 1-CPU workers not fit on 2 CPUs). Tune refuses an empty
# resource request, hence one byte of memory.
DRIVER_RESOURCES = {"CPU": 0, "memory": 1}

#: Report keys that say which GPUs a trial's workers hold (history table columns).
GPU_KEYS = ("gpu_ids", "cuda_visible_devices")


def resolve_runner(spec: Spec, *, workers: int | None = None) -> "Runner":
    """The runner for ``spec``: imports the trainable once to see what it is.

    Args:
        spec: The validated space.
        workers: Overrides ``resources.workers`` (``hpsearch trial --workers``).

    Raises:
        TrainableError: The trainable cannot be imported.
        SpaceError: It is a harness workload and the space gives it a value it refuses
            (checked here too when its source alone did not say it was one).
    """
    harness = is_harness_workload(load_trainable(spec.trainable))
    if harness:
        from hpsearch.space import check_harness_values

        check_harness_values(spec)
    workers = workers or spec.resources.workers
    if harness and workers == 1:
        return InProcessRunner(spec)
    if harness and spec.resources.warm_workers:
        return WarmRunner(spec, harness=True, workers=workers)
    return TrainRunner(spec, harness=harness, workers=workers)


@functools.lru_cache(maxsize=8)
def _trainable(ref: str) -> Any:
    """The trainable in this process (a trial actor, a Train worker), imported once."""
    return load_trainable(ref)


@dataclass(frozen=True)
class Runner:
    """How the trials of one spec run. Plain data: Tune pickles it with the trainable."""

    spec: Spec
    #: ``HPSEARCH_SIMULATE_GPU=1`` where the runner was built (the driver): train on the CPU.
    simulate_gpu: bool = field(default_factory=simulating_gpus)
    kind: ClassVar[str]
    #: Whether Tune may run the next trial in the previous trial's actor.
    reuse_actors: ClassVar[bool]

    @property
    def workers(self) -> int:
        return self.spec.resources.workers

    @property
    def tune_resources(self) -> dict[str, float]:
        """What the Tune trial itself reserves."""
        raise NotImplementedError

    @property
    def tune_max_failures(self) -> int:
        """How often Tune retries a failed trial."""
        return self.spec.trials.max_failures

    def trainable(self, sweep: SweepDir, *, resumed: bool = False) -> Any:
        """The Tune trainable: a function trial holding :attr:`tune_resources`.

        Args:
            sweep: The sweep directory.
            resumed: For a restored Tuner: each trial first looks in the trial table for
                an end Tune's saved state missed (:func:`recorded_end`). A new sweep's
                trials cannot have one, and skip that read of the table.
        """
        from ray import tune

        runner = self

        def hpsearch_trial(config: dict[str, Any]) -> None:
            runner.run_tune_trial(config, sweep, resumed=resumed)

        return tune.with_resources(hpsearch_trial, dict(self.tune_resources))

    def run_tune_trial(self, sampled: Mapping[str, Any], sweep: SweepDir, *,
                       resumed: bool = True) -> None:
        """Body of one Tune trial (runs in the trial's actor)."""
        from ray import tune

        from hpsearch.driver.repairs import recorded_end

        trial_id = tune.get_context().get_trial_id()
        done = recorded_end(sweep, trial_id) if resumed else None
        if done is not None:  # ended before a crash Tune's saved state did not see
            tune.report(sanitize_report(done, self.spec.objective))
            return
        self.run(self.config(sampled), trial_id=trial_id, sweep=sweep)

    def config(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        """The full training config of a sampled configuration."""
        config = self.spec.trial_config(sampled)
        config.setdefault("use_gpu", self.spec.resources.use_gpu)
        return self.simulated(config)

    def simulated(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` as the harness gets it: under simulated GPUs it trains on the CPU
        (the trial still holds the GPUs Ray assigned)."""
        return {**config, "use_gpu": False} if self.simulate_gpu else dict(config)

    def run(self, config: dict[str, Any], *, trial_id: str, sweep: SweepDir) -> None:
        raise NotImplementedError

    def open(self, sweep: SweepDir, *, slots: int) -> None:
        """Before the sweep's Tuner runs (driver side): set up what its trials share."""

    def close(self) -> None:
        """After the Tuner has run, however it ended: give back what :meth:`open` made."""


@dataclass(frozen=True)
class InProcessRunner(Runner):
    """One harness worker, trained inside the Tune trial's actor."""

    kind: ClassVar[str] = "in_process"
    reuse_actors: ClassVar[bool] = True

    @property
    def tune_resources(self) -> dict[str, float]:
        return self.spec.resources.per_worker()

    def run(self, config: dict[str, Any], *, trial_id: str, sweep: SweepDir) -> None:
        from hpsearch.train.loop import train

        require_cuda_if_asked(config)
        _limit_threads(self.spec.resources.cpus_per_worker)
        store = CheckpointStore(sweep, trial_id, keep=self.spec.checkpoints.keep)
        try:
            train(config, _trainable(self.spec.trainable), _TuneSession(self.spec.objective, store))
        finally:
            _release_cached_gpu_memory()  # Tune may run the next trial in this process

    def run_local(self, config: Mapping[str, Any], *, checkpoint_root: str | None = None,
                  on_report: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
        """Train ``config`` in this process, no Ray at all (``hpsearch trial``)."""
        from hpsearch.train.loop import train
        from hpsearch.train.session import LocalSession

        config = self.simulated(config)
        require_cuda_if_asked(config)
        session = LocalSession(root=checkpoint_root, on_report=on_report,
                               keep=self.spec.checkpoints.keep)
        train(dict(config), _trainable(self.spec.trainable), session)
        return session.reports


@dataclass(frozen=True)
class TrainRunner(Runner):
    """A Ray Train ``TorchTrainer`` per trial; the Tune trial only drives it."""

    harness: bool = True
    n_workers: int = 1
    kind: ClassVar[str] = "train"
    reuse_actors: ClassVar[bool] = False  # each TorchTrainer builds its own worker group

    def __init__(self, spec: Spec, *, harness: bool, workers: int):
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "simulate_gpu", simulating_gpus())
        object.__setattr__(self, "harness", harness)
        object.__setattr__(self, "n_workers", workers)

    @property
    def workers(self) -> int:
        return self.n_workers

    @property
    def tune_resources(self) -> dict[str, float]:
        return dict(DRIVER_RESOURCES)

    @property
    def tune_max_failures(self) -> int:
        # Ray Train retries the worker group itself; retrying the Tune trial too would run
        # a failing trial (max_failures + 1) ** 2 times.
        return 0

    def trainer(self, config: Mapping[str, Any], *, run_config: Any):
        """The ``TorchTrainer`` of one configuration."""
        from ray.train import ScalingConfig
        from ray.train.torch import TorchTrainer

        res = self.spec.resources
        if self.harness:
            loop: Callable[[dict[str, Any]], None] = _harness_worker_loop
            loop_config: dict[str, Any] = {"config": dict(config),
                                           "trainable": self.spec.trainable}
        else:
            loop, loop_config = _trainable(self.spec.trainable), dict(config)
        backend: dict[str, Any] = {}
        if self.simulate_gpu and res.use_gpu:
            from ray.train.torch import TorchConfig

            # Ray Train picks NCCL whenever its workers hold GPUs; simulated ones train on
            # the CPU, where only gloo works. The GPU reservations stay as they are.
            backend["torch_config"] = TorchConfig(backend="gloo")
        return TorchTrainer(
            loop,
            train_loop_config=loop_config,
            scaling_config=ScalingConfig(num_workers=self.n_workers, use_gpu=res.use_gpu,
                                         resources_per_worker=res.per_worker()),
            run_config=run_config,
            **backend,
        )

    def run(self, config: dict[str, Any], *, trial_id: str, sweep: SweepDir) -> None:
        from ray.train import CheckpointConfig, FailureConfig, RunConfig

        run_config = RunConfig(
            name=sweep.train_run_name(trial_id),
            storage_path=os.fspath(sweep.train),
            callbacks=[_forward_to_tune(self.spec.objective)],
            # A worker group that cannot start is retried once, not forever (Ray's default):
            # a trial that cannot get its workers fails and gives its resources back.
            failure_config=FailureConfig(max_failures=self.spec.trials.max_failures,
                                         controller_failure_limit=1),
            checkpoint_config=CheckpointConfig(num_to_keep=self.spec.checkpoints.keep),
        )
        self.trainer(config, run_config=run_config).fit()

    def run_on_ray(self, config: Mapping[str, Any], *, storage: str | None = None,
                   address: str | None = None,
                   on_report: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
        """Train ``config`` as one Ray Train run (``hpsearch trial --workers N``) and return
        rank 0's reports, calling ``on_report`` with each as it arrives.

        The reports are collected as they happen (Ray Train's own result keeps only the
        checkpointed ones, so a raw loop that reports without checkpoints would show none).
        """
        import tempfile
        import threading

        import ray
        from ray.train import RunConfig

        from hpsearch.driver.connect import connect

        conn = connect(address, verbose=True)
        try:
            log = ray.remote(num_cpus=0)(_ReportLog).remote()
            run_config = RunConfig(
                name="trial", storage_path=storage or tempfile.mkdtemp(prefix="hpsearch-trial-"),
                callbacks=[_record_reports(log)])
            trainer = self.trainer(self.simulated(config), run_config=run_config)
            outcome: dict[str, Any] = {}

            def fit() -> None:
                try:
                    trainer.fit()
                except BaseException as exc:  # noqa: BLE001 - re-raised below, here
                    outcome["error"] = exc

            thread = threading.Thread(target=fit, name="hpsearch-trial-fit", daemon=True)
            thread.start()
            reports: list[dict[str, Any]] = []
            while True:
                thread.join(timeout=0.5)
                for metrics in ray.get(log.since.remote(len(reports))):
                    reports.append(metrics)
                    if on_report is not None:
                        on_report(dict(metrics))
                if not thread.is_alive():
                    break
            if "error" in outcome:
                raise outcome["error"]
            return reports
        finally:
            if conn.started_local:
                conn.close()


#: The driver's handles of the warm pools it opened (pool name -> actor handle).
_OPEN_POOLS: dict[str, Any] = {}


@dataclass(frozen=True)
class WarmRunner(TrainRunner):
    """Several harness workers per trial, on warm worker groups reused across trials.

    The Tune trial holds no resources: it takes a free group from the sweep's pool,
    relays the group's reports to Tune and, when Tune stops it, frees the group at that
    report. See :mod:`hpsearch.driver.warm`.
    """

    pool: str = ""
    kind: ClassVar[str] = "warm"
    reuse_actors: ClassVar[bool] = True  # the thin Tune trial's actor is cheap to keep

    def __init__(self, spec: Spec, *, harness: bool = True, workers: int):
        super().__init__(spec, harness=True, workers=workers)
        from hpsearch.driver.warm import pool_name

        object.__setattr__(self, "pool", pool_name(spec.name))

    def open(self, sweep: SweepDir, *, slots: int) -> None:
        import ray

        from hpsearch.driver.ledger import NAMESPACE
        from hpsearch.driver.warm import WarmPool

        pool = ray.remote(num_cpus=0, max_concurrency=64)(WarmPool).options(
            name=self.pool, namespace=NAMESPACE).remote(self, sweep, slots)
        ray.get(pool.size.remote())  # up and named before the first trial looks for it
        _OPEN_POOLS[self.pool] = pool  # Ray ends an actor whose handles are all gone

    def close(self) -> None:
        import ray

        pool = _OPEN_POOLS.pop(self.pool, None) or self._pool()
        if pool is None:
            return
        try:
            ray.get(pool.close.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - killed below, and what it held reaped
            pass
        ray.kill(pool)
        from hpsearch.driver.repairs import reap_orphan_placement_groups

        try:
            reap_orphan_placement_groups()  # a group killed before Ray Train removed it
        except Exception:  # noqa: BLE001 - housekeeping must never end a sweep
            pass

    def _pool(self) -> Any:
        import ray

        from hpsearch.driver.ledger import NAMESPACE

        try:
            return ray.get_actor(self.pool, namespace=NAMESPACE)
        except ValueError:
            return None

    def set_slots(self, slots: int) -> None:
        """The sweep may hold ``slots`` groups now (its share of a shared cluster)."""
        pool = self._pool()
        if pool is not None:
            pool.set_limit.remote(slots)

    def trial_ended(self, trial_id: str) -> None:
        """Tune has ended ``trial_id`` (driver side): free its group if it still holds it."""
        pool = self._pool()
        if pool is not None:
            pool.release.remote(trial_id)

    def warm_trainer(self, host: Any, sweep: SweepDir, name: str) -> Any:
        """The long-lived ``TorchTrainer`` of one warm group."""
        from ray.train import FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        from hpsearch.driver.warm import warm_worker_loop

        res = self.spec.resources
        backend: dict[str, Any] = {}
        if self.simulate_gpu and res.use_gpu:
            from ray.train.torch import TorchConfig

            backend["torch_config"] = TorchConfig(backend="gloo")
        return TorchTrainer(
            warm_worker_loop,
            train_loop_config={"host": host, "trainable": self.spec.trainable, "sweep": sweep,
                               "objective": self.spec.objective,
                               "keep": self.spec.checkpoints.keep},
            scaling_config=ScalingConfig(num_workers=self.n_workers, use_gpu=res.use_gpu,
                                         resources_per_worker=res.per_worker()),
            run_config=RunConfig(
                name=f"{self.pool}-{name}", storage_path=os.fspath(sweep.train),
                # Failures are counted per trial by the group's host (trials.max_failures);
                # Ray Train restarts the group as often as it fails. A group that cannot
                # start is retried once, then the trial waiting for it fails.
                failure_config=FailureConfig(max_failures=-1, controller_failure_limit=1)),
            **backend,
        )

    def run(self, config: dict[str, Any], *, trial_id: str, sweep: SweepDir) -> None:
        import time

        import ray
        from ray import tune

        pool = self._pool()
        if pool is None:
            raise TrainableError(f"the sweep's worker-group pool {self.pool} is gone")
        host = ray.get(pool.acquire.remote(trial_id))
        while host is None:  # the slots are all busy: only while a share shrinks
            time.sleep(0.1)
            host = ray.get(pool.acquire.remote(trial_id))
        ended = False
        seq = ray.get(host.assign.remote(trial_id, config))
        try:
            relayed = 0
            while True:
                out = ray.get(host.poll.remote(seq, relayed, 1.0))
                for metrics in out["reports"]:
                    tune.report(metrics)  # returns once Tune goes on; a stop ends the thread
                    relayed += 1
                    host.ack.remote(seq, relayed)
                if out["state"] == "done":
                    ended = True
                    return
                if out["state"] in ("failed", "stopped"):
                    ended = True
                    raise TrainableError(out["error"] or f"the trial's worker group {out['state']}")
        finally:
            if not ended:
                host.stop.remote(seq)
            pool.release.remote(trial_id)


class _ReportLog:
    """Rank 0's reports of one Ray Train run, as its controller saw them (a tiny actor
    owned by the process that waits on the run)."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def add(self, metrics: dict[str, Any]) -> None:
        self.reports.append(metrics)

    def since(self, n: int) -> list[dict[str, Any]]:
        return self.reports[n:]


def _record_reports(log: Any) -> Any:
    """A Ray Train callback (it runs in the controller) that sends each report to ``log``,
    waiting until it is recorded."""
    import ray
    from ray.train import UserCallback

    class RecordReports(UserCallback):
        def after_report(self, run_context, metrics, checkpoint):  # noqa: ANN001
            first = _with_every_workers_gpus(metrics)
            ray.get(log.add.remote({k: v for k, v in first.items() if k != "checkpoint"}))

    return RecordReports()


def require_cuda_if_asked(config: Mapping[str, Any]) -> None:
    """``use_gpu: true`` with a CPU build of torch (or no visible GPU) would train on the
    CPU while holding the GPUs: refuse instead."""
    if not config.get("use_gpu"):
        return
    import torch

    if not torch.cuda.is_available():
        import socket

        raise TrainableError(
            f"resources.use_gpu is true but torch {torch.__version__} sees no CUDA device on "
            f"{socket.gethostname()}. Install a CUDA build of torch on every node, or set "
            "use_gpu: false."
        )


def _limit_threads(cpus: float) -> None:
    import torch

    torch.set_num_threads(max(1, int(cpus)))


def cuda_device_index(gpu_ids: Sequence[Any], visible: str | None) -> int | None:
    """Which ``cuda:N`` is the first GPU Ray assigned to this process: its position in
    ``CUDA_VISIBLE_DEVICES``. ``None`` when Ray assigned none (or it is not visible).

    Not the local rank: Ray Train shows every worker on a node all of that node's trial
    GPUs (``"0,1"`` for both workers), and workers that share a GPU (``gpus_per_worker:
    0.5``) are both given the same one (``"0"``: local rank 1 would ask for a ``cuda:1``
    that does not exist).

    Example:
        >>> cuda_device_index([3], "2,3"), cuda_device_index(["0"], "0"), cuda_device_index([], "0")
        (1, 0, None)
    """
    ids = [str(i) for i in gpu_ids]
    listed = [d.strip() for d in (visible or "").split(",") if d.strip()]
    if not ids or ids[0] not in listed:
        return None
    return listed.index(ids[0])


def _gpu_assignment() -> tuple[dict[str, str], int | None]:
    """The GPUs Ray assigned to this process, as report keys (:data:`GPU_KEYS`; none
    without GPUs), and the ``cuda:N`` index of the first one."""
    import ray

    ids = [str(i) for i in ray.get_gpu_ids()]
    if not ids:
        return {}, None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    keys = {"gpu_ids": ",".join(ids), "cuda_visible_devices": visible}
    return keys, cuda_device_index(ids, visible)


def _with_every_workers_gpus(metrics: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Rank 0's report, its :data:`GPU_KEYS` holding every worker's value in rank order,
    ``;`` between workers: ``gpu_ids`` ``"0;1"``, ``cuda_visible_devices`` ``"0,1;0,1"``."""
    first = dict(metrics[0])
    for key in GPU_KEYS:
        if any(key in m for m in metrics):
            first[key] = ";".join(str(m.get(key, "")) for m in metrics)
    return first


def _release_cached_gpu_memory() -> None:
    """Give the memory a finished in-process trial cached back to the GPU, for whoever
    shares it next (the next trial in this actor, or another one at gpus_per_worker < 1)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class CheckpointStore:
    """A trial's checkpoints, newest ``keep`` of them, in ``sweep.trial_checkpoints(id)``.

    In-process trials keep their checkpoints here rather than handing them to Tune. Tune
    deletes a trial's old checkpoints as new ones arrive but saves its experiment state
    only now and then, so a driver killed in between leaves a state that points at a
    deleted checkpoint and the trial cannot be restored (seen in the fault tests). Here a
    restarted trial, after a crash or a resume, always continues from its newest complete
    checkpoint; a checkpoint appears under its final name only once it is whole.
    """

    def __init__(self, sweep: SweepDir, trial_id: str, keep: int):
        self.sweep = sweep
        self.root = sweep.trial_checkpoints(trial_id)
        self.keep = keep

    def add(self, src: str, step: int) -> str:
        """Take ``src`` (a directory the loop wrote) as the checkpoint of ``step``."""
        import shutil

        os.makedirs(self.root, exist_ok=True)
        dest = self.root / f"checkpoint_{step:09d}"
        tmp = self.root / f".tmp-{os.getpid()}-{step}"
        self.sweep.remove(tmp)
        shutil.move(src, tmp)
        self.sweep.remove(dest)
        os.replace(tmp, dest)
        for old in self.all()[: -self.keep]:
            self.sweep.remove(old)
        return os.fspath(dest)

    def all(self) -> list[str]:
        if not self.root.is_dir():
            return []
        names = sorted(n for n in os.listdir(self.root) if n.startswith("checkpoint_"))
        return [os.fspath(self.root / n) for n in names]

    def latest(self) -> str | None:
        found = self.all()
        return found[-1] if found else None


class _TuneSession:
    """Harness session for in-process trials: metrics to Tune, checkpoints to a store."""

    world_rank = 0
    world_size = 1
    local_rank = 0

    def __init__(self, objective: Objective, store: CheckpointStore):
        self._objective = objective
        self._store = store
        # The Tune actor itself holds the trial's GPUs.
        self._gpus, self.device_index = _gpu_assignment()

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        from ray import tune

        metrics = {**sanitize_report(metrics, self._objective), **self._gpus}
        if checkpoint_dir:
            metrics["checkpoint_path"] = self._store.add(checkpoint_dir, int(metrics["step"]))
        tune.report(metrics)

    def latest_checkpoint_dir(self) -> str | None:
        return self._store.latest()


class _TrainSession:
    """Harness session inside a Ray Train worker."""

    def __init__(self) -> None:
        import ray.train

        ctx = ray.train.get_context()
        self.world_rank = ctx.get_world_rank()
        self.world_size = ctx.get_world_size()
        self.local_rank = ctx.get_local_rank()
        self._gpus, self.device_index = _gpu_assignment()

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        import ray.train

        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report({**metrics, **self._gpus}, checkpoint=checkpoint)
        if checkpoint_dir:  # Train has copied it into the run's storage
            from hpsearch.train.checkpoint import discard

            discard(checkpoint_dir)

    def latest_checkpoint_dir(self) -> str | None:
        import ray.train

        checkpoint = ray.train.get_checkpoint()
        return checkpoint.to_directory() if checkpoint else None


class _WarmSession:
    """Harness session of one trial on a warm worker group: rank 0 keeps the checkpoints
    (as in-process trials do) and hands each report to the group's host, which answers
    once Tune has taken it; every rank then leaves the trial together if Tune stopped it."""

    def __init__(self, host: Any, job: Mapping[str, Any], sweep: SweepDir,
                 objective: Objective, *, keep: int):
        import ray.train

        ctx = ray.train.get_context()
        self.world_rank = ctx.get_world_rank()
        self.world_size = ctx.get_world_size()
        self.local_rank = ctx.get_local_rank()
        gpus, self.device_index = _gpu_assignment()
        self._gpus = _every_workers_gpus(gpus, self.world_size)
        self._host = host
        self._seq = job["seq"]
        self._objective = objective
        self._store = CheckpointStore(sweep, job["trial_id"], keep=keep)

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        import ray

        from hpsearch.driver.warm import _TrialStopped, stop_flag

        stop = False
        if self.world_rank == 0:
            metrics = {**sanitize_report(metrics, self._objective), **self._gpus}
            if checkpoint_dir:
                metrics["checkpoint_path"] = self._store.add(checkpoint_dir, int(metrics["step"]))
            stop = ray.get(self._host.report.remote(self._seq, metrics))
        elif checkpoint_dir:
            from hpsearch.train.checkpoint import discard

            discard(checkpoint_dir)
        if stop_flag(stop, self.world_size):
            raise _TrialStopped

    def latest_checkpoint_dir(self) -> str | None:
        return self._store.latest()


def _every_workers_gpus(gpus: Mapping[str, str], world_size: int) -> dict[str, str]:
    """This worker's :data:`GPU_KEYS` joined with every other worker's, in rank order (a
    collective: every rank calls it)."""
    if world_size <= 1:
        return dict(gpus)
    import torch.distributed as dist

    every: list[Any] = [None] * world_size
    dist.all_gather_object(every, dict(gpus))
    return _with_every_workers_gpus(every) if any(every) else {}


def _harness_worker_loop(payload: dict[str, Any]) -> None:
    """``train_loop_per_worker`` for harness workloads under Ray Train."""
    from hpsearch.train.loop import train

    require_cuda_if_asked(payload["config"])
    session = _TrainSession()
    train(payload["config"], _trainable(payload["trainable"]), session)


def _forward_to_tune(objective: Objective) -> Any:
    from ray.tune.integration.ray_train import TuneReportCallback

    class ForwardToTune(TuneReportCallback):
        """Forwards rank 0's reports to Tune, sanitised for ASHA and Optuna."""

        def after_report(self, run_context, metrics, checkpoint):  # noqa: ANN001
            metrics = [sanitize_report(_with_every_workers_gpus(metrics), objective), *metrics[1:]]
            super().after_report(run_context, metrics, checkpoint)

    return ForwardToTune()
