"""Command trainables under Tune: one process per worker, reports read from rank 0's output.

:class:`CommandRunner` runs a trial's command

* with one worker, from the Tune trial's own actor (which holds the worker's CPUs and
  GPUs; a new one per trial, see :attr:`CommandRunner.reuse_actors`): no worker group to
  start, and none of
  torchrun's variables unless ``trainable.launcher: torchrun`` asks for them, so the
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
from typing import Any, Callable, ClassVar, Mapping

from hpsearch.command.process import run_command
from hpsearch.driver.cluster.connect import free_port
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

    #: Never: Tune reuses an actor only once its trial's thread has ended, within 2 s of
    #: the stop (``TUNE_FUNCTION_THREAD_TIMEOUT_S``), and a command's thread ends at the
    #: script's next report, an epoch later, then takes its process tree down (up to
    #: ``grace_s``). Past the 2 s, Ray 2.60's Tune fails the next trial ("Trainable
    #: runner reuse requires reset_config()") and never starts another: the sweep hangs
    #: with its CPUs free. A trial's own actor is ended with it, and its process tree with
    #: the actor (the supervisor's parent-death signal), at once. A new actor costs about
    #: a second; a script's own start (imports, data) costs more.
    reuse_actors: ClassVar[bool] = False

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

        self.run_reporting(config, trial_id=trial_id, trial_dir=str(sweep.trial_dir(trial_id)),
                           report=report, storage=str(sweep.train))

    def run_reporting(self, config: Mapping[str, Any], *, trial_id: str, trial_dir: str,
                      report: Callable[[dict[str, Any]], None], storage: str) -> None:
        """Run one trial, calling ``report`` with each of its reports as it comes."""
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
            metrics.poll()
            return quiet.exceeded()

        finished = run_command(launch, metrics.on_line, should_stop=should_stop)
        if finished.code is not None:
            metrics.finish()
        judge(self.spec, finished, metrics, launch.argv[0], quiet)

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
