"""Several harness workers per trial, on warm worker groups reused across trials.

The driver's side of :mod:`hpsearch.driver.trials.pool`: :class:`WarmRunner` opens the
sweep's pool of worker groups before the Tuner runs and closes it after; each Tune trial
is thin (no resources of its own): it takes a free group from the pool, relays the
group's reports to Tune and, when Tune stops it, frees the group at that report.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hpsearch.driver.cluster.connect import NAMESPACE
from hpsearch.driver.trials.runners import TrainRunner
from hpsearch.errors import TrainableError
from hpsearch.store.layout import SweepDir

__all__ = ["ACQUIRE_TIMEOUT_ENV", "WarmRunner"]

#: Seconds a trial waits for a free worker group before it fails (default 900).
ACQUIRE_TIMEOUT_ENV = "HPSEARCH_WARM_ACQUIRE_TIMEOUT_S"

class _OpenedPool:
    """The driver's handle of the pool a runner opened, held from :meth:`WarmRunner.open`
    to :meth:`WarmRunner.close`: Ray ends an actor whose handles are all gone.

    It stays on the driver: a pickled copy of the runner (in each Tune trial, in the pool
    itself) gets an empty one, and finds the pool by its name.
    """

    def __init__(self) -> None:
        self.handle: Any = None

    def __reduce__(self) -> tuple[type, tuple]:
        return _OpenedPool, ()


@dataclass(frozen=True)
class WarmRunner(TrainRunner):
    """Several harness workers per trial, on the sweep's warm worker groups."""

    pool: str = ""
    reuse_actors: ClassVar[bool] = True  # the thin Tune trial's actor is cheap to keep
    _opened: _OpenedPool = field(default_factory=_OpenedPool, init=False, repr=False,
                                 compare=False)

    def open(self, sweep: SweepDir, *, slots: int) -> None:
        import ray

        from hpsearch.driver.trials.pool import WarmPool

        pool = ray.remote(num_cpus=0, max_concurrency=64)(WarmPool).options(
            name=self.pool, namespace=NAMESPACE).remote(self, sweep, slots)
        ray.get(pool.size.remote())  # up and named before the first trial looks for it
        self._opened.handle = pool

    def close(self) -> None:
        import ray

        from hpsearch.driver.internals import reap_orphan_placement_groups

        pool, self._opened.handle = self._opened.handle or self._pool(), None
        if pool is None:
            return
        try:
            ray.get(pool.close.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - killed below, and what it held reaped
            pass
        ray.kill(pool)
        try:
            reap_orphan_placement_groups()  # a group killed before Ray Train removed it
        except Exception:  # noqa: BLE001 - housekeeping must never end a sweep
            pass

    def _pool(self) -> Any:
        import ray

        try:
            return ray.get_actor(self.pool, namespace=NAMESPACE)
        except ValueError:
            return None

    def set_slots(self, slots: int) -> None:
        pool = self._pool()
        if pool is not None:
            pool.set_limit.remote(slots)

    def trial_ended(self, trial_id: str) -> None:
        pool = self._pool()
        if pool is not None:
            pool.release.remote(trial_id)

    def warm_trainer(self, host: Any, sweep: SweepDir, name: str) -> Any:
        """The long-lived ``TorchTrainer`` of one warm group."""
        from ray.train import FailureConfig, RunConfig

        from hpsearch.driver.trials.warm_worker import warm_worker_loop

        return self.trainer(
            warm_worker_loop,
            {"host": host, "trainable": self.spec.trainable, "sweep": sweep,
             "objective": self.spec.objective, "keep": self.spec.checkpoints.keep,
             "use_gpu": self.simulated({"use_gpu": self.spec.resources.use_gpu})["use_gpu"],
             "first_collective_s": self.spec.resources.first_collective_timeout_s},
            run_config=RunConfig(
                name=f"{self.pool}-{name}", storage_path=os.fspath(sweep.train),
                # Failures are counted per trial by the group's host (trials.max_failures,
                # and one retry of a hung trial); Ray Train restarts the group as often as
                # it fails, and the host ends it after a second failed first collective.
                # A group whose controller fails is retried once, then the trial fails.
                failure_config=FailureConfig(max_failures=-1, controller_failure_limit=1)))

    def run(self, config: dict[str, Any], *, trial_id: str, sweep: SweepDir) -> None:
        import ray

        pool = self._pool()
        if pool is None:
            raise TrainableError(f"the sweep's worker-group pool {self.pool} is gone")
        host = _acquire(pool, trial_id)
        seq = ray.get(host.assign.remote(trial_id, config))
        ended = False
        try:
            ended = _relay(host, seq)
        finally:
            if not ended:
                host.stop.remote(seq)
            pool.release.remote(trial_id)


def _acquire(pool: Any, trial_id: str) -> Any:
    """A free worker group for ``trial_id``; waits while every slot is busy (only while a
    shared cluster's share shrinks), and fails the trial after ``ACQUIRE_TIMEOUT_ENV``."""
    import ray

    timeout = float(os.environ.get(ACQUIRE_TIMEOUT_ENV, "900"))
    started = time.monotonic()
    host = ray.get(pool.acquire.remote(trial_id))
    while host is None:
        if time.monotonic() - started > timeout:
            raise TrainableError(
                f"no warm worker group became free for trial {trial_id} in {timeout:.0f} s "
                f"({ACQUIRE_TIMEOUT_ENV}): the sweep's share of the cluster stayed below its "
                "running trials")
        time.sleep(0.1)
        host = ray.get(pool.acquire.remote(trial_id))
    return host


def _relay(host: Any, seq: int) -> bool:
    """Relay trial ``seq``'s reports from its group to Tune, one by one; returns once it
    has ended (``True``), or raises if its group failed or stopped."""
    import ray
    from ray import tune

    relayed = 0
    while True:
        out = ray.get(host.poll.remote(seq, relayed, 1.0))
        for metrics in out["reports"]:
            tune.report(metrics)  # returns once Tune goes on; a stop ends the thread
            relayed += 1
            host.ack.remote(seq, relayed)
        if out["state"] == "done":
            return True
        if out["state"] in ("failed", "stopped"):
            raise TrainableError(out["error"] or f"the trial's worker group {out['state']}")
