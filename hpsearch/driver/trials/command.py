"""Command trainables under Tune: one process per worker, reports read from rank 0's output.

:class:`CommandRunner` runs a trial's command

* with one worker, from the Tune trial's own actor (which holds the worker's CPUs and
  GPUs, and which Tune reuses for the next trial, see :attr:`CommandRunner.reuse_actors`):
  no worker group to start, and none of torchrun's variables unless ``trainable.launcher: torchrun`` asks for them, so the
  script runs exactly as ``python train.py`` by hand;
* with several, as a Ray Train run (:mod:`hpsearch.driver.trials.command_group`): one
  process per Train worker, with the environment ``torchrun`` gives, so a script that
  calls ``init_process_group()`` from the environment runs as DDP unchanged.

Either way the command's words come from
:func:`~hpsearch.driver.trials.command_launch.command_argv`, its output lands in
``{trial_dir}/output.log`` (``output-rank1.log``... for the other ranks), each line that
carries the objective is reported to Tune as it is printed, and the command's process tree
is gone when the trial ends (:mod:`hpsearch.command.process`). A restarted trial (a
retry, a resumed sweep) finds its ``{trial_dir}`` again and, when ``resume.if_exists`` is
there, runs with ``resume.args`` too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from hpsearch.command.process import run_command
from hpsearch.driver.cluster.connect import free_port
from hpsearch.driver.internals import trial_stop_event
from hpsearch.driver.trials.command_launch import (
    QuietLimit,
    judge,
    launch_for,
    metrics_for,
    torchrun_env,
)
from hpsearch.driver.trials.runners import DRIVER_RESOURCES, Runner
from hpsearch.store.layout import SweepDir

__all__ = ["CommandRunner"]


@dataclass(frozen=True)
class CommandRunner(Runner):
    """A command trainable's trials (see the module docstring)."""

    n_workers: int = 1

    @property
    def workers(self) -> int:
        return self.n_workers

    @property
    def reuse_actors(self) -> bool:  # type: ignore[override]
        """One worker: Tune reuses a finished trial's actor for the next (a new actor
        costs seconds a trial on a busy node: 22 trials against 60 in the same 30 s of
        second-long trials, ``benchmarks/README.md``). Tune reuses it once the old trial's
        thread has ended, within ``TUNE_FUNCTION_THREAD_TIMEOUT_S`` (2 s by default), else
        fails the next trial and starts no other. A stopped trial's thread ends with its
        command: at once when the stop comes at a report (ASHA's), within half a second
        otherwise (:meth:`run_reporting`), then SIGTERM and up to ``stop_grace_s`` for the
        script to exit; so the wait is raised to cover that grace
        (:func:`_await_stopped_command`). A group's thin actor is not reused: with Ray
        2.60 the sweep then never started its next trial."""
        return self.n_workers == 1

    @property
    def uses_worker_groups(self) -> bool:  # type: ignore[override]
        return self.n_workers > 1

    @property
    def tune_resources(self) -> dict[str, float]:
        return self.spec.resources.per_worker() if self.n_workers == 1 else dict(DRIVER_RESOURCES)

    @property
    def tune_max_failures(self) -> int:
        # A group's retries are Ray Train's (see TrainRunner.tune_max_failures).
        return self.spec.trials.max_failures if self.n_workers == 1 else 0

    def config(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        return self.spec.trial_config(sampled)

    def run(self, config: dict[str, Any], *, trial_id: str, sweep: SweepDir) -> None:
        from ray import tune

        from hpsearch.driver.trials.gpus import gpu_assignment
        from hpsearch.store.reports import sanitize_report

        gpus, _ = gpu_assignment()

        def report(metrics: dict[str, Any]) -> None:
            tune.report({**sanitize_report(metrics, self.spec.objective), **gpus})

        stop = trial_stop_event() if self.n_workers == 1 else None
        if stop is not None:
            _await_stopped_command(self.spec.command.stop_grace_s)
        self.run_reporting(config, trial_id=trial_id, trial_dir=str(sweep.trial_dir(trial_id)),
                           report=report, storage=str(sweep.train),
                           stopped=stop.is_set if stop is not None else None)

    def run_reporting(self, config: Mapping[str, Any], *, trial_id: str, trial_dir: str,
                      report: Callable[[dict[str, Any]], None], storage: str,
                      stopped: Callable[[], bool] | None = None) -> None:
        """Run one trial, calling ``report`` with each of its reports as it comes;
        ``stopped`` (a one-worker trial under Tune) says Tune has stopped it, and its
        command is ended within half a second, not at its next report."""
        if self.n_workers > 1:
            from hpsearch.driver.trials.command_group import run_group

            run_group(self, dict(config), trial_id=trial_id, trial_dir=trial_dir,
                      report=report, storage=storage)
            return
        env = {}  # `python train.py`, as run by hand: a script that reads RANK as "am I
        # DDP?" (nanoGPT) must not think torchrun started it
        if self.spec.command.torchrun_at(1):
            env = torchrun_env(rank=0, local_rank=0, world=1, local_world=1, node_rank=0,
                               master=("127.0.0.1", free_port()))
        launch = launch_for(self.spec, config, trial_id=trial_id, trial_dir=trial_dir, env=env)
        quiet = QuietLimit(self.spec.trials.hung_after_s)

        def counted(found: dict[str, Any]) -> None:
            quiet.reported()
            report(found)

        metrics = metrics_for(self.spec, trial_dir, counted)  # output, files, pushes

        def should_stop() -> bool:
            if stopped is not None and stopped():
                return True
            metrics.poll()
            return quiet.exceeded()

        finished = run_command(launch, metrics.on_line, should_stop=should_stop)
        if finished.code is not None:
            metrics.finish()
        judge(self.spec, finished, metrics, launch.argv[0], quiet, launch.resume)

    def run_alone(self, config: Mapping[str, Any], *, storage: str | None = None,
                  address: str | None = None,
                  on_report: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
        """Run one configuration outside a sweep (``hpsearch trial``); a group needs Ray."""
        import tempfile

        root = storage or tempfile.mkdtemp(prefix="hpsearch-trial-")
        reports: list[dict[str, Any]] = []

        def report(metrics: dict[str, Any]) -> None:
            reports.append(metrics)
            if on_report is not None:
                on_report(dict(metrics))

        trial_dir = os.path.join(root, "trial")
        if self.n_workers == 1:
            self.run_reporting(config, trial_id="trial", trial_dir=trial_dir, report=report,
                               storage=root)
            return reports
        from hpsearch.driver.cluster.connect import connect

        conn = connect(address, verbose=True)
        try:
            self.run_reporting(config, trial_id="trial", trial_dir=trial_dir, report=report,
                               storage=root)
        finally:
            if conn.started_local:
                conn.close()
        return reports


def _await_stopped_command(grace_s: float) -> None:
    """Let Tune wait, before it reuses this actor, until a stopped trial's command is gone:
    seen within half a second of the stop, it gets SIGTERM, ``grace_s`` (``trainable.stop_grace_s``) and then SIGKILL
    (:mod:`hpsearch.command.process`). Tune reads ``TUNE_FUNCTION_THREAD_TIMEOUT_S``
    (2 s by default) in this process when it reuses the actor; a script that takes longer
    to exit on SIGTERM (Lightning writes a checkpoint) would otherwise fail the next trial,
    and the sweep would start no other."""
    os.environ["TUNE_FUNCTION_THREAD_TIMEOUT_S"] = str(int(grace_s) + 30)
