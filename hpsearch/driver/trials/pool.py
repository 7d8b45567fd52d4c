"""Warm worker groups: multi-worker harness trials that reuse their DDP workers.

A cold multi-worker trial starts a Ray Train run of its own: a controller, its helper
actors, the worker actors, torch, gloo and the data, about 15-20 s before its first step
(``benchmarks/trial_startup.py``). Here each trial *slot* of a sweep keeps one long-lived
``TorchTrainer`` whose workers run trial after trial:

* a :class:`GroupHost` actor (no resources) runs the trainer's ``fit()`` in a thread and is
  the group's mailbox: the trial it should train now, the reports it made, whether it
  was stopped;
* the workers run :func:`~hpsearch.driver.trials.warm_worker.warm_worker_loop`: rank 0 asks the host for the next trial and
  tells the other ranks over the process group; every rank trains it with the harness,
  then waits for the next one;
* the Tune trial is thin (:class:`hpsearch.driver.trials.warm.WarmRunner`, no resources): it
  takes a free group from the sweep's :class:`WarmPool`, hands it its configuration and
  relays rank 0's reports to Tune, one by one. Rank 0 waits at each report until Tune has
  taken it: Tune goes on, or stops the trial (ASHA), and then every rank leaves the trial
  at that report and the group is free for the next within a second.

Ray Train keeps owning the worker group, its process group and its failures: a worker
that dies makes the controller restart the group (``FailureConfig(max_failures=-1)``),
and the new workers pick up the trial they were training, which resumes from its newest
checkpoint (kept by rank 0 in the sweep's :class:`~hpsearch.driver.trials.checkpoints.CheckpointStore`,
as in-process trials keep theirs). Failures are counted per trial: a trial whose workers
failed more than ``trials.max_failures`` times fails, and the group goes on warm. Two
kinds of failure are bounded tighter, because each costs the group's GPUs for a timeout:

* a group whose first collective fails (:func:`~hpsearch.train.devices.first_collective`,
  ``resources.first_collective_timeout``, run by every worker as the group starts, before
  any other collective) is restarted once; a second failed start fails its trial with
  the guard's one line and ends the group (the pool makes a new one for the next trial);
* a trial whose workers fell silent for ``resources.collective_timeout`` before they
  failed (a hung collective, which NCCL ends by aborting the process) is retried once;
  a second such failure fails it.

Nothing of one trial survives into the next: the harness builds the model, optimizer,
data and generators from the trial's config and seed each time; GPU memory the last
trial cached is released and the peak counter reset between trials.

The pool holds at most the sweep's share of slots (:mod:`hpsearch.driver.limits.ledger`): when
the share shrinks, idle groups are shut down at once and busy ones when their trial ends.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpsearch.store.layout import SweepDir

__all__ = ["LEASE_S", "GroupHost", "WarmPool", "pool_name"]

#: Seconds without word from a trial's Tune side after which its workers leave it (the
#: Tune trial died without saying so).
LEASE_S = 60.0
#: Seconds rank 0 waits for a trial before it tells the other ranks "still idle" (the
#: process group's collectives time out after ``resources.collective_timeout``, 10 min by
#: default).
IDLE_POLL_S = 5.0
#: Failed starts (first collectives) after which a group is given up: one retry.
START_FAILURES = 2
#: Hung attempts of one trial (silent for the collective timeout, then failed) after which
#: it fails: one retry.
HANGS = 2


class _Job:
    def __init__(self, seq: int, trial_id: str, config: dict[str, Any]):
        self.seq = seq
        self.trial_id = trial_id
        self.config = config
        self.reports: list[dict[str, Any]] = []
        self.acked = 0
        self.state = "pending"  # pending | running | done | failed | stopped
        self.error: str | None = None
        self.pickups = 0
        self.hangs = 0  # attempts that fell silent for the collective timeout, then failed
        self.seen = time.monotonic()  # last word from the Tune side
        self.heard = time.monotonic()  # last word from its workers (a pickup, a report)


class GroupHost:
    """One warm worker group: runs its ``TorchTrainer`` and is its mailbox (a Ray actor
    with threads; see the module docstring)."""

    def __init__(self, runner: Any, sweep: SweepDir, name: str):
        self.runner = runner
        self.sweep = sweep
        self.name = name
        self.cond = threading.Condition()
        self.jobs: dict[int, _Job] = {}
        self.current: _Job | None = None
        self.next_seq = 0
        self.shutting_down = False
        self.ended = False
        self.error: str | None = None
        self.thread: threading.Thread | None = None
        self.start_failures = 0

    # -- the group itself -------------------------------------------------------------
    def start(self, handle: Any) -> None:
        """Start the trainer (its workers run ``warm_worker_loop`` until shut down)."""
        trainer = self.runner.warm_trainer(handle, self.sweep, self.name)

        def fit() -> None:
            try:
                trainer.fit()
            except BaseException as exc:  # noqa: BLE001 - kept for the trial that waits
                self.error = f"{type(exc).__name__}: {exc}"
            with self.cond:
                self.ended = True
                job = self.current
                if job is not None and job.state in ("pending", "running"):
                    job.state = "failed"
                    job.error = job.error or self.error or "the worker group ended"
                self.cond.notify_all()

        self.thread = threading.Thread(target=fit, name=f"hpsearch-{self.name}", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return not self.ended and not self.shutting_down

    def idle(self) -> bool:
        """No trial is assigned, or the last one has ended (its workers have left it)."""
        with self.cond:
            return self.current is None or self.current.state in ("done", "failed", "stopped")

    def shutdown(self, wait_s: float = 0.0) -> bool:
        """Let the workers leave their loop after the current trial: ``fit()`` returns and
        Ray Train removes the group. Returns whether it ended within ``wait_s``."""
        with self.cond:
            self.shutting_down = True
            job = self.current
            if job is not None and job.state in ("pending", "running"):
                job.state = "stopped"
            self.cond.notify_all()
        if self.thread is not None and wait_s > 0:
            self.thread.join(wait_s)
        return self.ended

    # -- the Tune side ----------------------------------------------------------------
    def assign(self, trial_id: str, config: dict[str, Any]) -> int:
        """Give the group a trial to train; returns its sequence number."""
        with self.cond:
            if self.ended or self.shutting_down:
                raise RuntimeError(f"worker group {self.name} has ended: {self.error}")
            if self.current is not None and self.current.state in ("pending", "running"):
                raise RuntimeError(f"worker group {self.name} is busy with "
                                   f"{self.current.trial_id}")
            job = _Job(self.next_seq, trial_id, config)
            self.next_seq += 1
            self.jobs = {job.seq: job}  # the previous trial is over: forget it
            self.current = job
            self.cond.notify_all()
            return job.seq

    def poll(self, seq: int, since: int, wait_s: float = 1.0) -> dict[str, Any]:
        """Reports after the first ``since`` of trial ``seq``, and its state; waits up to
        ``wait_s`` for something new."""
        deadline = time.monotonic() + wait_s
        with self.cond:
            job = self.jobs.get(seq)
            if job is None:
                return {"reports": [], "state": "failed", "error": "unknown trial"}
            while (len(job.reports) <= since and job.state in ("pending", "running")
                   and time.monotonic() < deadline):
                job.seen = time.monotonic()
                self.cond.wait(max(0.0, deadline - time.monotonic()))
            job.seen = time.monotonic()
            return {"reports": job.reports[since:], "state": job.state, "error": job.error}

    def ack(self, seq: int, relayed: int) -> None:
        """Tune has taken the first ``relayed`` reports and goes on with the trial."""
        with self.cond:
            job = self.jobs.get(seq)
            if job is not None:
                job.acked = max(job.acked, relayed)
                job.seen = time.monotonic()
                self.cond.notify_all()

    def stop(self, seq: int) -> None:
        """The trial is over on the Tune side (stopped, or ended): its workers leave it."""
        with self.cond:
            job = self.jobs.get(seq)
            if job is not None and job.state in ("pending", "running"):
                job.state = "stopped"
                self.cond.notify_all()

    def stop_trial(self, trial_id: str) -> None:
        with self.cond:
            job = self.current
        if job is not None and job.trial_id == trial_id:
            self.stop(job.seq)

    # -- the workers' side (rank 0) ---------------------------------------------------
    def next_job(self, after: int, wait_s: float = IDLE_POLL_S) -> dict[str, Any]:
        """The trial rank 0 should train next: ``{"job": ...}``, ``{"idle": True}`` or
        ``{"shutdown": True}``. ``after``: the last trial this worker process finished
        (``-1`` for fresh workers, which pick up an unfinished trial: a restart)."""
        deadline = time.monotonic() + wait_s
        with self.cond:
            while True:
                if self.shutting_down:
                    return {"shutdown": True}
                job = self.current
                if job is not None and job.seq > after and job.state in ("pending", "running"):
                    job.pickups += 1
                    limit = self.runner.spec.trials.max_failures + 1
                    timeout_s = self.runner.spec.resources.collective_timeout_s
                    if job.pickups > 1 and time.monotonic() - job.heard >= timeout_s:
                        job.hangs += 1  # silent for a collective timeout, then failed
                    if job.hangs >= HANGS:
                        job.state = "failed"
                        job.error = (f"the trial's workers hung {job.hangs} times: silent for "
                                     f"resources.collective_timeout ({timeout_s:g} s) before "
                                     "they failed; not retried again")
                        self.cond.notify_all()
                        continue
                    if job.pickups > limit:
                        job.state = "failed"
                        job.error = job.error or (f"the trial's workers failed {job.pickups - 1} "
                                                  f"times (trials.max_failures: {limit - 1})")
                        self.cond.notify_all()
                        continue
                    job.heard = time.monotonic()
                    job.state = "running"
                    return {"job": {"seq": job.seq, "trial_id": job.trial_id,
                                    "config": job.config, "attempt": job.pickups}}
                left = deadline - time.monotonic()
                if left <= 0:
                    return {"idle": True}
                self.cond.wait(left)

    def report(self, seq: int, metrics: dict[str, Any]) -> bool:
        """Rank 0's report: wait until Tune has taken it. Returns whether the trial stops."""
        with self.cond:
            job = self.jobs.get(seq)
            if job is None or job.state != "running":
                return True
            job.reports.append(metrics)
            job.heard = time.monotonic()
            self.cond.notify_all()
            index = len(job.reports)
            while job.state == "running" and job.acked < index:
                if time.monotonic() - job.seen > LEASE_S:
                    job.state = "stopped"
                    job.error = "its Tune trial stopped answering"
                    break
                self.cond.wait(1.0)
            return job.state != "running"

    def finish(self, seq: int) -> None:
        """The harness returned: every report is in."""
        with self.cond:
            job = self.jobs.get(seq)
            if job is not None and job.state == "running":
                job.state = "done"
            self.cond.notify_all()

    def group_failed(self, error: str) -> None:
        """A worker's first collective failed as the group started (Ray Train restarts
        it): the second time, the trial waiting on the group fails with ``error`` and the
        group is given up."""
        with self.cond:
            self.start_failures += 1
            job = self.current
            if job is not None and job.state in ("pending", "running"):
                job.error = error
                if self.start_failures >= START_FAILURES:
                    job.state = "failed"
            if self.start_failures >= START_FAILURES:
                self.shutting_down = True
                self.error = error
            self.cond.notify_all()

    def given_up(self) -> bool:
        """Whether the group's workers should leave at once (shut down, or given up)."""
        with self.cond:
            return self.shutting_down

    def job_error(self, seq: int, error: str) -> None:
        """A worker raised while training trial ``seq`` (Ray Train restarts the group)."""
        with self.cond:
            job = self.jobs.get(seq)
            if job is not None and job.error is None:
                job.error = error
            self.cond.notify_all()


class WarmPool:
    """A sweep's warm groups, at most ``limit`` of them (a Ray actor with threads).

    Args:
        runner: The sweep's :class:`~hpsearch.driver.trials.warm.WarmRunner`.
        sweep: Its :class:`~hpsearch.store.layout.SweepDir`.
        limit: Slots the sweep may hold now (its planned slots, then its share).
    """

    def __init__(self, runner: Any, sweep: SweepDir, limit: int):
        self.runner = runner
        self.sweep = sweep
        self.limit = max(0, int(limit))
        self.lock = threading.Lock()
        self.groups: dict[str, Any] = {}  # name -> host handle
        self.busy: dict[str, str] = {}  # name -> trial id
        self.made = 0
        self.closed = False

    def _host_cls(self) -> Any:
        import ray

        return ray.remote(num_cpus=0, max_concurrency=64)(GroupHost)

    def acquire(self, trial_id: str) -> Any:
        """A free group for ``trial_id`` (a new one when there is room), or ``None``."""
        import ray

        with self.lock:
            if self.closed:
                raise RuntimeError("the sweep has ended")
            for name, host in list(self.groups.items()):
                if name in self.busy:
                    continue
                try:
                    alive = ray.get(host.alive.remote(), timeout=10)
                    idle = alive and ray.get(host.idle.remote(), timeout=10)
                except Exception:  # noqa: BLE001 - a dead host
                    alive = idle = False
                if not alive:
                    self._drop(name)
                elif idle:
                    self.busy[name] = trial_id
                    return host
            if len(self.groups) >= self.limit:
                return None
            name = f"warm-{self.made}"
            self.made += 1
            host = self._host_cls().remote(self.runner, self.sweep, name)
            ray.get(host.start.remote(host))
            self.groups[name] = host
            self.busy[name] = trial_id
            return host

    def release(self, trial_id: str) -> None:
        """``trial_id`` is over: its group takes the next trial, or is shut down when the
        sweep holds more groups than it may."""
        with self.lock:
            for name, tid in list(self.busy.items()):
                if tid == trial_id:
                    host = self.groups.get(name)
                    del self.busy[name]
                    if host is not None:
                        host.stop_trial.remote(trial_id)
            self._shrink()

    def set_limit(self, limit: int) -> None:
        """The sweep's share changed: hold at most ``limit`` groups (idle ones go now)."""
        with self.lock:
            self.limit = max(0, int(limit))
            self._shrink()

    def size(self) -> dict[str, int]:
        with self.lock:
            return {"groups": len(self.groups), "busy": len(self.busy), "limit": self.limit}

    def close(self, wait_s: float = 30.0) -> None:
        """Shut every group down and wait for Ray Train to remove them."""
        import ray

        with self.lock:
            self.closed = True
            hosts = list(self.groups.items())
            self.groups.clear()
            self.busy.clear()
        ends = [host.shutdown.remote(wait_s) for _, host in hosts]
        try:
            ray.get(ends, timeout=wait_s + 5)
        except Exception:  # noqa: BLE001 - killed below; the janitor reaps what is left
            pass
        for _, host in hosts:
            try:
                ray.kill(host)
            except Exception:  # noqa: BLE001
                pass

    def _shrink(self) -> None:
        for name in [n for n in self.groups if n not in self.busy]:
            if len(self.groups) <= self.limit:
                return
            host = self.groups.pop(name)
            host.shutdown.remote(0.0)

    def _drop(self, name: str) -> None:
        host = self.groups.pop(name, None)
        self.busy.pop(name, None)
        if host is not None:
            try:
                import ray

                ray.kill(host)
            except Exception:  # noqa: BLE001
                pass


def pool_name(sweep: str | os.PathLike) -> str:
    """A name for a sweep run's pool actor, unique per run (``sweep``: its name or its
    directory)."""
    import uuid

    return f"hpsearch-warm-{os.path.basename(os.fspath(sweep))}-{uuid.uuid4().hex[:8]}"
