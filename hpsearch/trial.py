"""One trial: the Ray Tune function that trains one configuration.

Two ways to run a trial, chosen per space (see :func:`hpsearch.cluster.uses_worker_group`):

* **In-process** (one-worker harness trials): the harness trains inside the Tune trial's
  own actor. No worker group, no process group, no second actor: trial start-up drops from
  tens of seconds to about one (see ``benchmarks/trial_startup.py``).
* **Ray Train** (several workers, or a raw ``train_loop_per_worker``): the Tune trial builds
  a ``TorchTrainer`` (Train V2) and forwards rank 0's reports to Tune with a
  ``TuneReportCallback`` so ASHA can stop it mid-training.

This is the only module that imports ``ray.train``.
"""

from __future__ import annotations

import math
import os
import shutil
from typing import Any, Callable, Mapping

from hpsearch.cluster import DRIVER_RESOURCES, is_harness_workload, uses_worker_group
from hpsearch.errors import TrainableError
from hpsearch.space.spec import Objective, Spec
from hpsearch.tables import TUNE_KEYS
from hpsearch.trainables import BUILTINS, load_trainable



def worst_value(objective: Objective) -> float:
    return math.inf if objective.mode == "min" else -math.inf


def sanitize_report(metrics: Mapping[str, Any], objective: Objective) -> dict[str, Any]:
    """Make a report safe for ASHA and Optuna.

    A missing or non-finite objective (a diverged run, an unsupported precision, a raw loop
    that reports other metrics) becomes the worst value for the mode: Optuna rejects NaN,
    ASHA's cut-offs ignore it, and a missing key crashes the searcher.
    """
    out = {k: v for k, v in metrics.items() if k != "checkpoint"}
    value = out.get(objective.metric)
    try:
        finite = value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        finite = False
    if not finite:
        out[objective.metric] = worst_value(objective)
    return out


def format_report(metrics: Mapping[str, Any]) -> str:
    """One line per report, for ``hpsearch trial``."""
    keys = ("epoch", "step", "lr", "train_loss", "val_loss", "grad_norm", "samples_per_s")
    parts = []
    for key in (*keys, *sorted(k for k in metrics if k.startswith("val_") and k not in keys)):
        value = metrics.get(key)
        if value is None:
            continue
        parts.append(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
    status = metrics.get("status")
    if status not in (None, "running"):
        parts.append(f"[{status}{': ' + str(metrics['reason']) if metrics.get('reason') else ''}]")
    return "  ".join(parts)


def make_trainable(spec: Spec, *, sweep_dir: str) -> Any:
    """The Tune trainable for ``spec``, with the resources its trial must hold."""
    from ray import tune

    def hpsearch_trial(config: dict[str, Any]) -> None:
        run_trial(config, spec=spec, sweep_dir=sweep_dir)

    res = spec.resources
    if uses_worker_group(spec):
        resources: dict[str, float] = dict(DRIVER_RESOURCES)
    else:
        resources = {"CPU": res.cpus_per_worker}
        if res.use_gpu:
            resources["GPU"] = res.gpus_per_worker or 1
    return tune.with_resources(hpsearch_trial, resources)


def recorded_end(sweep_dir: str, trial_id: str) -> dict[str, Any] | None:
    """The last report of a trial the trial table says has ended, else ``None``.

    Tune saves its experiment state only now and then. After a driver crash it may hold a
    trial as unfinished that had in fact ended (and whose row and history are on disk);
    such a trial replays its last report instead of training again.
    """
    from hpsearch.tables import ENDED, HISTORY_FILE, TRIALS_FILE

    trials_path = os.path.join(sweep_dir, TRIALS_FILE)
    if not os.path.exists(trials_path):
        return None
    import pandas as pd

    trials = pd.read_parquet(trials_path, columns=["trial_id", "status"])
    status = trials.loc[trials.trial_id == trial_id, "status"]
    if status.empty or status.iloc[0] not in ENDED:
        return None
    history = pd.read_parquet(os.path.join(sweep_dir, HISTORY_FILE))
    rows = history[history.trial_id == trial_id]
    if rows.empty:
        return None
    last = rows.iloc[-1].dropna().to_dict()
    last.pop("trial_id", None)
    return last


def run_trial(sampled: Mapping[str, Any], *, spec: Spec, sweep_dir: str) -> None:
    """Body of one Tune trial (runs in the trial's actor)."""
    from ray import tune

    done = recorded_end(sweep_dir, tune.get_context().get_trial_id())
    if done is not None:
        tune.report(sanitize_report(done, spec.objective))
        return
    config = spec.trial_config(sampled)
    config.setdefault("use_gpu", spec.resources.use_gpu)
    trainable = load_trainable(spec.trainable)
    if not uses_worker_group(spec):
        from hpsearch.train.loop import train

        require_cuda_if_asked(config)
        _limit_threads(spec.resources.cpus_per_worker)
        trial_id = tune.get_context().get_trial_id()
        store = CheckpointStore(os.path.join(sweep_dir, CHECKPOINTS_DIR, trial_id),
                                keep=spec.checkpoints.keep)
        train(config, trainable, _TuneSession(spec.objective, store))
        return
    _run_train(config, trainable, spec=spec, sweep_dir=sweep_dir)


def require_cuda_if_asked(config: Mapping[str, Any]) -> None:
    """``use_gpu: true`` with a CPU build of torch (or no visible GPU) would train on the
    CPU while holding the GPUs: refuse instead."""
    if not config.get("use_gpu"):
        return
    import torch

    if not torch.cuda.is_available():
        import socket

        build = torch.__version__
        raise TrainableError(
            f"resources.use_gpu is true but torch {build} sees no CUDA device on "
            f"{socket.gethostname()}. Install a CUDA build of torch on every node, or set "
            "use_gpu: false."
        )


def _limit_threads(cpus: float) -> None:
    import torch

    torch.set_num_threads(max(1, int(cpus)))


CHECKPOINTS_DIR = "checkpoints"


class CheckpointStore:
    """A trial's checkpoints, newest ``keep`` of them: ``<root>/checkpoint_<step>``.

    In-process trials keep their checkpoints here rather than handing them to Tune. Tune
    deletes a trial's old checkpoints as new ones arrive but saves its experiment state
    only now and then, so a driver killed in between leaves a state that points at a
    deleted checkpoint and the trial cannot be restored (seen in the fault tests). Here a
    restarted trial, after a crash or a resume, always continues from its newest complete
    checkpoint; a checkpoint appears under its final name only once it is whole.
    """

    def __init__(self, root: str, keep: int):
        self.root = root
        self.keep = keep

    def add(self, src: str, step: int) -> str:
        os.makedirs(self.root, exist_ok=True)
        dest = os.path.join(self.root, f"checkpoint_{step:09d}")
        tmp = os.path.join(self.root, f".tmp-{os.getpid()}-{step}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.move(src, tmp)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
        for old in self.all()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return dest

    def all(self) -> list[str]:
        if not os.path.isdir(self.root):
            return []
        names = sorted(n for n in os.listdir(self.root) if n.startswith("checkpoint_"))
        return [os.path.join(self.root, n) for n in names]

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

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        from ray import tune

        metrics = sanitize_report(metrics, self._objective)
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
        self.echo = False  # print each report (rank 0 of `hpsearch trial --workers N`)

    def report(self, metrics: dict[str, Any], checkpoint_dir: str | None = None) -> None:
        import ray.train

        if self.echo:
            print(format_report(metrics), flush=True)
        checkpoint = ray.train.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None
        ray.train.report(metrics, checkpoint=checkpoint)
        if checkpoint_dir:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)

    def latest_checkpoint_dir(self) -> str | None:
        import ray.train

        checkpoint = ray.train.get_checkpoint()
        return checkpoint.to_directory() if checkpoint else None


def _harness_worker_loop(payload: dict[str, Any]) -> None:
    """``train_loop_per_worker`` for harness workloads under Ray Train."""
    from hpsearch.train.loop import train

    require_cuda_if_asked(payload["config"])
    session = _TrainSession()
    if payload.get("echo") and session.world_rank == 0:
        session.echo = True
    train(payload["config"], load_trainable(payload["trainable"]), session)


def _forward_to_tune(objective: Objective) -> Any:
    from ray.tune.integration.ray_train import TuneReportCallback

    class ForwardToTune(TuneReportCallback):
        """Forwards rank 0's reports to Tune, sanitised for ASHA and Optuna."""

        def after_report(self, run_context, metrics, checkpoint):  # noqa: ANN001
            metrics = [sanitize_report(metrics[0], objective), *metrics[1:]]
            super().after_report(run_context, metrics, checkpoint)

    return ForwardToTune()


def _run_train(config: dict[str, Any], trainable: Any, *, spec: Spec, sweep_dir: str) -> None:
    from ray import tune
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    res = spec.resources
    per_worker = {"CPU": res.cpus_per_worker}
    if res.use_gpu:
        per_worker["GPU"] = res.gpus_per_worker or 1
    harness = is_harness_workload(trainable)
    loop: Callable[[dict[str, Any]], None] = _harness_worker_loop if harness else trainable
    loop_config = {"config": config, "trainable": spec.trainable} if harness else config
    trial_id = tune.get_context().get_trial_id()
    trainer = TorchTrainer(
        loop,
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(
            num_workers=res.workers, use_gpu=res.use_gpu, resources_per_worker=per_worker
        ),
        run_config=RunConfig(
            name=f"train-{trial_id}",
            storage_path=os.path.join(sweep_dir, "train"),
            callbacks=[_forward_to_tune(spec.objective)],
            failure_config=FailureConfig(max_failures=spec.trials.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=spec.checkpoints.keep),
        ),
    )
    result = trainer.fit()
    reported = result.metrics or {}
    if not harness and spec.objective.metric not in reported:
        bookkeeping = TUNE_KEYS | {"training_iteration", "time_total_s"}
        names = ", ".join(sorted(k for k in reported if k not in bookkeeping)) or "none"
        raise TrainableError(
            f"{spec.trainable} never reported the objective metric "
            f"{spec.objective.metric!r}; it reported: {names}. Report it with "
            f"ray.train.report({{{spec.objective.metric!r}: ...}}) or change objective.metric."
        )


# --- one configuration, no search (`hpsearch trial`) -----------------------------------


def single_config(spec: Spec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config ``hpsearch trial`` trains, and the searched values it chose for it.

    Searched parameters take their midpoint (geometric for log scales) or first choice;
    ``--set`` overrides have already made the ones the user chose fixed.
    """
    defaults = spec.default_config()
    chosen = {p.name: defaults[p.name] for p in spec.params if p.name in defaults}
    config = spec.trial_config(chosen)
    config.setdefault("use_gpu", spec.resources.use_gpu)
    return config, chosen


def check_harness_config(spec: Spec) -> None:
    """Refuse, before any trial starts, fixed values the training loop would reject
    (``batch_size: 0``, ``grad_clip: -1``): otherwise every trial fails the same way."""
    if spec.trainable not in BUILTINS and not is_harness_workload(load_trainable(spec.trainable)):
        return
    from hpsearch.train.loop import HarnessConfig

    try:
        HarnessConfig.from_config(single_config(spec)[0])
    except ValueError as exc:
        raise TrainableError(f"invalid training config: {exc}") from None


def run_single(
    spec: Spec,
    config: Mapping[str, Any],
    *,
    workers: int = 1,
    checkpoint_root: str | None = None,
    on_report: Callable[[dict[str, Any]], None] | None = None,
    address: str | None = None,
    verbose: bool = False,
) -> list[dict[str, Any]]:
    """Train one full config (already through :meth:`Spec.trial_config`); return its reports.

    One harness worker trains in this process: no Ray at all. Several workers, or a raw
    ``train_loop_per_worker``, run as a Ray Train run on ``address`` or a local Ray.
    """
    trainable = load_trainable(spec.trainable)
    if workers == 1 and is_harness_workload(trainable):
        from hpsearch.train.loop import train
        from hpsearch.train.session import LocalSession

        session = LocalSession(root=checkpoint_root, on_report=on_report, keep=spec.checkpoints.keep)
        train(config, trainable, session)
        return session.reports
    return _run_single_on_ray(
        spec, dict(config), trainable, workers=workers, address=address, verbose=verbose,
        storage=checkpoint_root,
    )


def _run_single_on_ray(spec, config, trainable, *, workers, address, verbose, storage):
    import tempfile

    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from hpsearch.cluster import connect

    res = spec.resources
    per_worker = {"CPU": res.cpus_per_worker}
    if res.use_gpu:
        per_worker["GPU"] = res.gpus_per_worker or 1
    harness = is_harness_workload(trainable)
    conn = connect(address, verbose=True)
    try:
        trainer = TorchTrainer(
            _harness_worker_loop if harness else trainable,
            train_loop_config={"config": config, "trainable": spec.trainable, "echo": True}
            if harness else config,
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=res.use_gpu,
                                         resources_per_worker=per_worker),
            run_config=RunConfig(
                name="trial", storage_path=storage or tempfile.mkdtemp(prefix="hpsearch-trial-")
            ),
        )
        result = trainer.fit()
    finally:
        if conn.started_local:
            conn.close()
    df = result.metrics_dataframe
    return [] if df is None else df.to_dict("records")
