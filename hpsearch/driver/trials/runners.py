"""How a trial runs: in the Tune trial's own process, or as a Ray Train run.

A runner knows what its callers need and nothing else: the resources its Tune trial
holds, whether Tune may reuse that trial's actor, how often Tune retries it, how to run
one configuration, and what it opens and closes around a sweep. Three runners
(:func:`hpsearch.driver.trials.resolve.resolve_runner` picks one per spec):

* :class:`InProcessRunner`, for one-worker harness trials: the harness trains inside the
  Tune trial's actor, which Tune reuses for the next trial. No worker group, no process
  group: start-up drops from tens of seconds to a fraction of one
  (``benchmarks/trial_startup.py``).
* :class:`TrainRunner`, for a raw ``train_loop_per_worker`` or ``warm_workers: false``: the
  Tune trial builds a ``TorchTrainer`` (Ray Train V2) and forwards rank 0's reports to
  Tune so ASHA can stop it mid-training. Its Ray Train run is named after the trial's
  hpsearch id, so a continued trial resumes from the run's newest checkpoint.
* :class:`~hpsearch.driver.trials.warm.WarmRunner`, for several harness workers on warm
  worker groups reused across trials.

Every Tune trial finds its hpsearch id in its config
(:data:`~hpsearch.driver.search.ids.TRIAL_ID_KEY`). Under ``HPSEARCH_SIMULATE_GPU=1``
(tests only, read where the runner is built) Ray still reserves and assigns the GPUs,
but the harness trains on the CPU and several workers talk over gloo.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Mapping

from hpsearch.driver.cluster.preflight import simulating_gpus
from hpsearch.driver.search.ids import TRIAL_ID_KEY
from hpsearch.driver.trials.checkpoints import CheckpointStore
from hpsearch.driver.trials.gpus import (
    limit_threads,
    release_cached_gpu_memory,
    require_cuda_if_asked,
)
from hpsearch.space.spec import Spec
from hpsearch.store.layout import SweepDir
from hpsearch.workloads.resolve import load_trainable

__all__ = ["HangLedger", "InProcessRunner", "Runner", "TrainRunner", "train_then_release",
           "trainable_of"]

# The Tune trial that drives a Ray Train run only waits on it, so it reserves no CPU (a
# fraction would make two 1-CPU workers not fit on 2 CPUs). Tune refuses an empty
# resource request, hence one byte of memory.
DRIVER_RESOURCES = MappingProxyType({"CPU": 0, "memory": 1})


@functools.lru_cache(maxsize=8)
def trainable_of(ref: str) -> Any:
    """The trainable in this process (a trial actor, a Train worker), imported once."""
    return load_trainable(ref)


@dataclass(frozen=True)
class Runner:
    """How the trials of one spec run. Plain data: Ray ships it to every trial."""

    spec: Spec
    #: ``HPSEARCH_SIMULATE_GPU=1`` where the runner was built (the driver): train on the CPU.
    simulate_gpu: bool = field(default_factory=simulating_gpus)
    #: Whether Tune may run the next trial in the previous trial's actor.
    reuse_actors: ClassVar[bool] = False
    #: Whether its trials run Ray Train worker groups (which a dead controller can leak).
    uses_worker_groups: ClassVar[bool] = True
    #: Where a multi-worker trial's workers go: ``STRICT_PACK`` (one node: the plan says
    #: whether a trial fits on one) or ``PACK``.
    placement: str = "STRICT_PACK"

    @property
    def workers(self) -> int:
        return self.spec.resources.workers

    @property
    def tune_resources(self) -> dict[str, float]:
        """What the Tune trial itself reserves."""
        return dict(DRIVER_RESOURCES)

    @property
    def tune_max_failures(self) -> int:
        """How often Tune retries a failed trial."""
        return self.spec.trials.max_failures

    def trainable(self, sweep: SweepDir) -> Any:
        """The Tune trainable: a function trial holding :attr:`tune_resources`."""
        from ray import tune

        runner = self

        def hpsearch_trial(config: dict[str, Any]) -> None:
            sampled = dict(config)
            trial_id = sampled.pop(TRIAL_ID_KEY, None) or tune.get_context().get_trial_id()
            runner.run(runner.config(sampled), trial_id=trial_id, sweep=sweep)

        return tune.with_resources(hpsearch_trial, dict(self.tune_resources))

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
        """Train one configuration as trial ``trial_id`` (in its Tune trial's actor)."""
        raise NotImplementedError

    def run_alone(self, config: Mapping[str, Any], *, storage: str | None = None,
                  address: str | None = None,
                  on_report: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
        """Train ``config`` outside a sweep (``hpsearch trial``); return its reports."""
        raise NotImplementedError

    def open(self, sweep: SweepDir, *, slots: int) -> None:
        """Before the sweep's Tuner runs (driver side): set up what its trials share."""

    def close(self) -> None:
        """After the Tuner has run, however it ended: give back what :meth:`open` made."""

    def set_slots(self, slots: int) -> None:
        """The sweep may run ``slots`` trials at once now (its share of a shared cluster)."""

    def trial_ended(self, trial_id: str) -> None:
        """Tune has ended trial ``trial_id`` (driver side)."""


@dataclass(frozen=True)
class InProcessRunner(Runner):
    """One harness worker, trained inside the Tune trial's actor."""

    reuse_actors: ClassVar[bool] = True
    uses_worker_groups: ClassVar[bool] = False

    @property
    def tune_resources(self) -> dict[str, float]:
        return self.spec.resources.per_worker()

    def run(self, config: dict[str, Any], *, trial_id: str, sweep: SweepDir) -> None:
        from hpsearch.driver.trials.sessions import TuneSession

        require_cuda_if_asked(config)
        limit_threads(self.spec.resources.cpus_per_worker)
        store = CheckpointStore(sweep, trial_id, keep=self.spec.checkpoints.keep)
        train_then_release(config, trainable_of(self.spec.trainable),
                           TuneSession(self.spec.objective, store,
                                       gpu_share=self.spec.resources.gpus_per_worker))

    def run_alone(self, config: Mapping[str, Any], *, storage: str | None = None,
                  address: str | None = None,
                  on_report: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
        """Train ``config`` in this process, no Ray at all."""
        from hpsearch.train.loop import train
        from hpsearch.train.session import LocalSession

        config = self.simulated(config)
        require_cuda_if_asked(config)
        session = LocalSession(root=storage, on_report=on_report,
                               keep=self.spec.checkpoints.keep)
        train(dict(config), trainable_of(self.spec.trainable), session)
        return session.reports


def train_then_release(config: dict[str, Any], workload: Any, session: Any) -> None:
    """Train, then give the trial's cached GPU memory back, for the next trial in this
    process (Tune reuses one-worker trials' actors).

    Tune stops a trial by raising ``SystemExit`` out of its report, and while that
    exception is being handled its traceback still holds the training frames, so the
    model: the memory is released only once the exception is gone, then the stop goes on.
    """
    from hpsearch.train.loop import train

    stopped = False
    try:
        train(config, workload, session)
    except SystemExit:
        stopped = True
    finally:
        if not stopped:
            release_cached_gpu_memory()
    if stopped:  # the frames and the model went with the handled exception
        release_cached_gpu_memory()
        raise SystemExit(0)


@dataclass(frozen=True)
class TrainRunner(Runner):
    """A Ray Train ``TorchTrainer`` per trial; the Tune trial only drives it."""

    harness: bool = True
    n_workers: int = 1

    @property
    def workers(self) -> int:
        return self.n_workers

    @property
    def tune_max_failures(self) -> int:
        # Ray Train retries the worker group itself; retrying the Tune trial too would run
        # a failing trial (max_failures + 1) ** 2 times.
        return 0

    def trainer(self, loop: Callable[[dict[str, Any]], None], loop_config: dict[str, Any], *,
                run_config: Any) -> Any:
        """A ``TorchTrainer`` over this spec's workers running ``loop``."""
        from ray.train import ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        res = self.spec.resources
        # Ray Train picks NCCL whenever its workers hold GPUs; simulated ones train on the
        # CPU, where only gloo works. The GPU reservations stay as they are.
        backend = "gloo" if self.simulate_gpu and res.use_gpu else None
        return TorchTrainer(
            loop, train_loop_config=loop_config,
            scaling_config=ScalingConfig(num_workers=self.n_workers, use_gpu=res.use_gpu,
                                         resources_per_worker=res.per_worker(),
                                         placement_strategy=self.placement),
            run_config=run_config,
            torch_config=TorchConfig(backend=backend,
                                     timeout_s=max(1, round(res.collective_timeout_s))))

    def _loop(self, config: Mapping[str, Any], ledger: str | None = None
              ) -> tuple[Callable, dict[str, Any]]:
        if self.harness:
            return harness_worker_loop, {
                "config": dict(config), "trainable": self.spec.trainable,
                "first_collective_s": self.spec.resources.first_collective_timeout_s,
                "hang_ledger": ledger, "collective_timeout_s":
                    self.spec.resources.collective_timeout_s}
        return trainable_of(self.spec.trainable), dict(config)

    def run(self, config: dict[str, Any], *, trial_id: str, sweep: SweepDir) -> None:
        from ray.train import CheckpointConfig, FailureConfig, RunConfig

        from hpsearch.driver.trials.sessions import forward_to_tune

        run_config = RunConfig(
            name=sweep.train_run_name(trial_id),
            storage_path=os.fspath(sweep.train),
            callbacks=[forward_to_tune(self.spec.objective)],
            # A worker group that cannot start is retried once, not forever (Ray's default):
            # a trial that cannot get its workers fails and gives its resources back.
            failure_config=FailureConfig(max_failures=self.spec.trials.max_failures,
                                         controller_failure_limit=1),
            checkpoint_config=CheckpointConfig(num_to_keep=self.spec.checkpoints.keep),
        )
        ledger = os.path.join(os.fspath(sweep.train), run_config.name, HangLedger.FILE)
        if os.path.exists(ledger):  # from a run before a resume: its silence was no hang
            HangLedger(ledger, 0).reset()
        self.trainer(*self._loop(config, ledger), run_config=run_config).fit()

    def run_alone(self, config: Mapping[str, Any], *, storage: str | None = None,
                  address: str | None = None,
                  on_report: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
        """Train ``config`` as one Ray Train run and return rank 0's reports, calling
        ``on_report`` with each as it arrives (Ray Train's own result keeps only the
        checkpointed ones, so a raw loop that reports without checkpoints would show none)."""
        import tempfile

        from ray.train import RunConfig

        from hpsearch.driver.cluster.connect import connect
        from hpsearch.driver.trials.sessions import ReportLog, record_reports

        conn = connect(address, verbose=True)
        try:
            import ray

            log = ray.remote(num_cpus=0)(ReportLog).remote()
            run_config = RunConfig(
                name="trial", storage_path=storage or tempfile.mkdtemp(prefix="hpsearch-trial-"),
                callbacks=[record_reports(log)])
            trainer = self.trainer(*self._loop(self.simulated(config)), run_config=run_config)
            return _fit_relaying(trainer, log, on_report)
        finally:
            if conn.started_local:
                conn.close()


def _fit_relaying(trainer: Any, log: Any, on_report: Callable | None) -> list[dict[str, Any]]:
    """``trainer.fit()`` in a thread, relaying ``log``'s reports as they come."""
    import threading

    import ray

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


class HangLedger:
    """A cold trial's record of its attempts, in its Ray Train run's folder (shared
    storage): when its workers last gave word (an attempt's start, a report) and how many
    attempts hung. Ray Train retries a failed attempt up to ``trials.max_failures`` times;
    an attempt that starts after its predecessor was silent for the collective timeout
    follows a hang (NCCL ends a hung collective by aborting the process), and a trial
    that hung twice is not retried again: each further attempt fails at once, in seconds,
    not after another collective timeout on every GPU of the trial."""

    FILE = "hpsearch-attempts.json"
    HANGS = 2  # hung attempts after which the trial fails: one retry

    def __init__(self, path: str, timeout_s: float):
        self.path = path
        self.timeout_s = timeout_s

    def _read(self) -> dict[str, Any]:
        import json

        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def _write(self, state: dict[str, Any]) -> None:
        import json

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.path)

    def reset(self) -> None:
        """A new Tune attempt of the trial (a resume): nothing before it counts."""
        self._write({})

    def attempt_starts(self, now: float | None = None) -> None:
        """Rank 0, as an attempt starts. Raises once the trial has hung twice."""
        import time

        now = time.time() if now is None else now
        state = self._read()
        hangs = int(state.get("hangs", 0))
        if "heard" in state and now - float(state["heard"]) >= self.timeout_s:
            hangs += 1
        self._write({"hangs": hangs, "heard": now})
        if hangs >= self.HANGS:
            raise RuntimeError(
                f"the trial's workers hung {hangs} times: silent for "
                f"resources.collective_timeout ({self.timeout_s:g} s) before they failed; "
                "not retried again")

    def heard(self, now: float | None = None) -> None:
        """Rank 0, at each report: the workers are alive."""
        import time

        state = self._read()
        self._write({**state, "heard": time.time() if now is None else now})


def harness_worker_loop(payload: dict[str, Any]) -> None:
    """``train_loop_per_worker`` for harness workloads under Ray Train."""
    from hpsearch.driver.trials.sessions import TrainSession
    from hpsearch.train.loop import train

    session = TrainSession(first_collective_s=payload.get("first_collective_s"))
    if payload.get("hang_ledger") and session.world_rank == 0:
        ledger = HangLedger(payload["hang_ledger"], payload["collective_timeout_s"])
        ledger.attempt_starts()
        session.on_report = ledger.heard
    require_cuda_if_asked(payload["config"])
    train(payload["config"], trainable_of(payload["trainable"]), session)
