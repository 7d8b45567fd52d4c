"""How one rank of a command trial starts and how its end is judged: the command's words,
the ``torchrun`` environment, its log, and the one-line error of a failed command. Plain
functions, shared by the one-process runner and the Ray Train group."""

from __future__ import annotations

import os
import sys
import time
import zlib
from typing import Any, Callable, Mapping

from hpsearch.command.metrics import OutputReader
from hpsearch.command.process import Finished, Launch
from hpsearch.command.resume import Resume, resume_for
from hpsearch.command.sources import TrialMetrics
from hpsearch.command.template import render
from hpsearch.errors import TrialFailedError
from hpsearch.command.push import REPORT_FILE_ENV
from hpsearch.space.spec import Command, Spec

__all__ = ["QuietLimit", "command_argv", "command_cwd", "judge", "launch_for", "metrics_for",
           "push_file", "reader_for", "torchrun_env"]


def command_argv(spec: Spec, config: Mapping[str, Any], *, trial_id: str,
                 trial_dir: str) -> list[str]:
    """The words trial ``trial_id`` runs: placeholders filled in, and ``resume.args``
    appended when ``{trial_dir}/<resume.if_exists>`` exists (a glob: its newest match not
    refused, which ``{resume_from}`` names; see :mod:`hpsearch.command.resume`).
    A bare ``python`` (or
    ``python3``) is the Python this process runs, as W&B's ``${interpreter}`` is: the
    environment that has hpsearch and torch, on every node."""
    return _words(spec, config, trial_id=trial_id, trial_dir=trial_dir)[0]


def _words(spec: Spec, config: Mapping[str, Any], *, trial_id: str,
           trial_dir: str) -> tuple[list[str], Resume | None]:
    command: Command = spec.command  # type: ignore[assignment]
    values = {**config, "trial_dir": trial_dir, "max_t": spec.scheduler.max_t,
              "trial_id": trial_id}
    values.setdefault("seed", zlib.crc32(trial_id.encode()) % 2**31)
    argv = render(command.argv, values, optional=spec.conditional)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable  # the Python hpsearch (or the Ray worker) runs in
    resume = resume_for(trial_dir, command.resume_if_exists)
    if resume is not None:
        argv += render(command.resume_args, {**values, "resume_from": resume.match},
                       optional=spec.conditional)
    return argv, resume


#: The variables torchrun sets: a plain launch neither sets nor passes them on.
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def torchrun_env(*, rank: int, local_rank: int, world: int, local_world: int, node_rank: int,
                 master: tuple[str, int]) -> dict[str, str]:
    """The variables ``torchrun`` sets for each process it starts."""
    return {"RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(local_world), "GROUP_RANK": str(node_rank),
            "NODE_RANK": str(node_rank), "MASTER_ADDR": master[0],
            "MASTER_PORT": str(master[1])}


def launch_for(spec: Spec, config: Mapping[str, Any], *, trial_id: str, trial_dir: str,
               env: Mapping[str, str], rank: int = 0) -> Launch:
    """How one rank of trial ``trial_id`` starts."""
    command: Command = spec.command  # type: ignore[assignment]
    os.makedirs(trial_dir, exist_ok=True)
    threads = str(max(1, int(spec.resources.cpus_per_worker)))
    full_env = {"OMP_NUM_THREADS": threads, **dict(command.env), **env,
                "HPSEARCH_TRIAL_ID": trial_id, "HPSEARCH_TRIAL_DIR": trial_dir,
                REPORT_FILE_ENV: push_file(trial_dir)}
    log = os.path.join(trial_dir, "output.log" if rank == 0 else f"output-rank{rank}.log")
    argv, resume = _words(spec, config, trial_id=trial_id, trial_dir=trial_dir)
    unset = () if "RANK" in env else TORCHRUN_VARS
    return Launch(argv=argv, cwd=command_cwd(command), env=full_env, log=log,
                  grace_s=command.stop_grace_s, unset=unset, resume=resume)


def command_cwd(command: Command) -> str:
    """Where the command runs on this node: ``cwd``, or the same folder of the job's working
    directory where that path is not here (a working directory Ray unpacked per node)."""
    if os.path.isdir(command.cwd) or command.cwd_in_job is None:
        return command.cwd
    return os.path.normpath(os.path.join(os.getcwd(), command.cwd_in_job))


def reader_for(spec: Spec) -> OutputReader:
    command: Command = spec.command  # type: ignore[assignment]
    time_key = spec.scheduler.time_attr if spec.scheduler.budget_key else None
    return OutputReader(command.metrics, objective=spec.objective.metric, time_key=time_key)


class QuietLimit:
    """``trials.hung_after``: whether the command has reported nothing for too long."""

    def __init__(self, limit_s: float | None, clock=time.monotonic):
        self.limit_s, self.clock = limit_s, clock
        self.last = clock()
        self.hung = False

    def reported(self) -> None:
        self.last = self.clock()

    def exceeded(self) -> bool:
        if self.limit_s is not None and self.clock() - self.last > self.limit_s:
            self.hung = True
        return self.hung


def push_file(trial_dir: str) -> str:
    """Where ``hpsearch.report`` writes in this trial (hpsearch's part of its folder)."""
    return os.path.join(trial_dir, ".hpsearch", "reports.jsonl")


def metrics_for(spec: Spec, trial_dir: str,
                report: Callable[[dict[str, Any]], None]) -> TrialMetrics:
    """Everything trial ``trial_dir`` reads reports from, calling ``report`` with each:
    give its ``on_line`` and ``poll`` to ``run_command``, call ``finish`` at the end."""
    command: Command = spec.command  # type: ignore[assignment]
    time_key = spec.scheduler.time_attr if spec.scheduler.budget_key else None
    os.makedirs(os.path.dirname(push_file(trial_dir)), exist_ok=True)
    return TrialMetrics(patterns=command.metrics, objective=spec.objective.metric,
                        time_key=time_key, trial_dir=trial_dir, files=command.metrics_from,
                        push_file=push_file(trial_dir), report=report)


def judge(spec: Spec, finished: Finished, reader: OutputReader | TrialMetrics,
          argv0: str, quiet: QuietLimit | None = None, resume: Resume | None = None) -> None:
    """Raise the one-line error (:class:`TrialFailedError`) of a command that failed, hung
    or never reported. A command given a checkpoint to resume from (``resume``) that
    failed before its first report refuses that checkpoint to the trial's next attempts
    (:meth:`Resume.refuse`), and the line says so."""
    if quiet is not None and quiet.hung:
        raise TrialFailedError(f"`{argv0}` hung: reported nothing for {quiet.limit_s:.0f} s "
                               f"(trials.hung_after), so it was stopped; its last lines: "
                               f"{finished.tail_text()}")
    if finished.code is None:
        return  # stopped
    if finished.code != 0:
        how = f"exited with code {finished.code}"
        if finished.code > 128:
            how = f"was killed by signal {finished.code - 128}"
        raise TrialFailedError(f"`{argv0}` {how}{_refused(resume, reader)}; its last "
                               f"lines: {finished.tail_text()}")
    if reader.reports == 0:
        metric = spec.objective.metric
        seen = ", ".join(sorted(reader.seen)) or "none"
        where = "its output.log" + (" and trainable.metrics_from"
                                    if spec.command and spec.command.metrics_from else "")
        raise TrialFailedError(
            f"`{argv0}` never reported {metric}: read 0 reports from {where} (metrics "
            f"it printed: {seen}); its last lines: {finished.tail_text()}; print "
            f"`{metric}=<value>` lines, or set trainable.metrics (a pattern with "
            f"`(?P<{metric}>...)`) or trainable.metrics_from (a file the script writes)")


def _refused(resume: Resume | None, reader: OutputReader | TrialMetrics) -> str:
    """The end of a failed command's line when it failed resumed, before its first report:
    the checkpoint is refused (likely cut short by a kill), and what comes next."""
    if resume is None or reader.reports:
        return ""
    instead = resume.refuse()
    return (f" before its first report, resumed from {resume.named(resume.match)} (a "
            "checkpoint cut short when its trial was killed fails so, and the trial's next "
            f"attempt resumes from {resume.named(instead)})")
