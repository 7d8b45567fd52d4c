"""Which runner a spec's trials run with, decided once per sweep (and per ``hpsearch
trial``): the one place the driver imports the user's trainable."""

from __future__ import annotations

from hpsearch.driver.trials.runners import InProcessRunner, Runner, TrainRunner
from hpsearch.driver.trials.warm import WarmRunner
from hpsearch.space.spec import Spec
from hpsearch.workloads.resolve import is_harness_workload, load_trainable

__all__ = ["checkpoint_estimate", "resolve_runner"]


def resolve_runner(spec: Spec, *, workers: int | None = None) -> Runner:
    """The runner for ``spec``: imports the trainable once to see what it is.

    * a harness workload with one worker: :class:`InProcessRunner`;
    * a harness workload with several, ``warm_workers: true`` (the default): :class:`WarmRunner`;
    * otherwise (a raw Ray Train loop, or ``warm_workers: false``): :class:`TrainRunner`;
    * a command: :class:`~hpsearch.driver.trials.command.CommandRunner` (nothing imported).

    Args:
        spec: The validated space.
        workers: Overrides ``resources.workers`` (``hpsearch trial --workers``).

    Raises:
        TrainableError: The trainable cannot be imported.
        SpaceError: It is a harness workload and the space gives it a value it refuses
            (checked here too when its source alone did not say it was one).
    """
    if spec.command is not None:
        from hpsearch.driver.trials.command import CommandRunner

        return CommandRunner(spec, n_workers=workers or spec.resources.workers)
    harness = is_harness_workload(load_trainable(spec.trainable))
    if harness:
        from hpsearch.space import check_harness_values

        check_harness_values(spec)
    workers = workers or spec.resources.workers
    if harness and workers == 1:
        return InProcessRunner(spec)
    if harness and spec.resources.warm_workers:
        from hpsearch.driver.trials.pool import pool_name

        return WarmRunner(spec, harness=True, n_workers=workers, pool=pool_name(spec.name))
    return TrainRunner(spec, harness=harness, n_workers=workers)


def checkpoint_estimate(spec: Spec) -> int | None:
    """About how large one checkpoint of the largest model ``spec`` can build is, for a
    harness workload (:func:`hpsearch.train.checkpoint.estimate_bytes`); ``None`` for a
    raw loop or a command, whose checkpoints are theirs to shape."""
    if spec.command is not None:
        return None
    from hpsearch.train.checkpoint import estimate_bytes

    workload = load_trainable(spec.trainable)
    if not is_harness_workload(workload):
        return None
    return estimate_bytes(workload.build_model, spec.upper_config())
