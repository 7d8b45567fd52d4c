"""End-to-end sweeps on the shared local Ray instance: real Ray Tune, Ray Train, Optuna and
torch on the CPU. Slow on 2 cores (trial start-up dominates), so few and meaningful."""

from __future__ import annotations

import textwrap

import optuna
import pytest

import hpsearch
from hpsearch.space import load_space
from hpsearch.driver.sweep.run import run_sweep
from hpsearch.store.layout import SweepDir

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def write_space(tmp_path, body: str):
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(body))
    return path


DDP_SPACE = """\
    name: ddp
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr:        {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
      precision: {type: categorical, choices: [fp32, bf16]}
      batch_size: 64
    search:    {algorithm: tpe, seed: 3, n_startup_trials: 6}
    scheduler: {type: asha, time_attr: epoch, max_t: 3, grace_period: 1, reduction_factor: 3}
    trials:    {num: 6, max_concurrent: auto}
    resources: {workers: 2, cpus_per_worker: 1}
"""


def test_ddp_sweep_runs_waves_stops_weak_trials_and_writes_consistent_tables(
    tmp_path, ray_instance
):
    from ray.tune import ExperimentAnalysis
    from ray.util import placement_group_table

    spec = load_space(write_space(tmp_path, DDP_SPACE))
    result = run_sweep(spec, storage=str(tmp_path / "runs"))
    sweep_dir = result.sweep_dir

    # 2-worker trials on 2 CPUs: one slot, so six trials run in six waves, all on one warm
    # worker group: only the first trial waited for its workers to start.
    assert result.plan.slots == 1 and result.status == "finished"
    trials = hpsearch.read_trials(sweep_dir)
    history = hpsearch.read_history(sweep_dir)
    assert len(trials) == 6 and trials.trial_id.is_unique
    assert set(trials.status) <= {"completed", "stopped_by_asha"}
    assert (trials.status == "stopped_by_asha").sum() >= 1
    assert set(trials.precision) == {"fp32", "bf16"}
    assert (trials.worker_s == 2 * trials.wall_s).all()
    by_start = trials.sort_values("started_at")
    assert by_start.startup_s.iloc[0] > 3 and (by_start.startup_s.iloc[1:] < 3).all(), \
        list(by_start.startup_s)
    assert len(list((sweep_dir / "train").glob("hpsearch-warm-*"))) == 1

    # The tables agree with Tune's own record of the experiment.
    analysis = ExperimentAnalysis(str(SweepDir(sweep_dir).tune))
    tune_frames = analysis.trial_dataframes
    assert len(tune_frames) == 6
    by_id = {t.trial_id: t for t in analysis.trials}
    for row in trials.itertuples():
        tune_df = tune_frames[row.trial_id]
        assert row.final_value == pytest.approx(tune_df["val_loss"].iloc[-1])
        assert row.best_value == pytest.approx(tune_df["val_loss"].min())
        assert row.epochs == tune_df["epoch"].iloc[-1]
        assert row.lr == pytest.approx(by_id[row.trial_id].config["lr"])
        mine = history[history.trial_id == row.trial_id]
        assert list(mine.step) == list(tune_df["step"])
        stopped_early = row.status == "stopped_by_asha"
        assert (row.epochs < 3) == stopped_early
    assert not history.duplicated(["trial_id", "step"]).any()

    # Every trial is in the Optuna study, linked by trial_id, COMPLETE with the table's
    # final value when it completed, PRUNED with its curve when ASHA stopped it.
    from hpsearch.driver.record.study import load_sweep_study

    study = load_sweep_study(SweepDir(sweep_dir))
    assert len(study.trials) == 6
    by_id = {t.user_attrs["trial_id"]: t for t in study.trials}
    for row in trials.itertuples():
        trial = by_id[row.trial_id]
        assert trial.number == row.optuna_trial
        if row.status == "completed":
            assert trial.state == optuna.trial.TrialState.COMPLETE
            assert trial.value == pytest.approx(row.final_value)
        else:
            assert trial.state == optuna.trial.TrialState.PRUNED
        assert max(trial.intermediate_values) == int(row.epochs)

    # A stopped trial frees its workers: no placement group is left holding resources
    # (removal is asynchronous, so allow the cleaner a few seconds).
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [g for g in placement_group_table().values() if g["state"] != "REMOVED"]
        cpus = ray_instance.available_resources().get("CPU")
        if not left and cpus == ray_instance.cluster_resources()["CPU"]:
            break
        time.sleep(0.5)
    assert not left, left
    assert cpus == ray_instance.cluster_resources()["CPU"]

    # Bounded disk: once every trial has ended, only the 3 best keep (at most 2) checkpoints.
    def checkpoint_dirs(root, trial_id):
        return SweepDir(root).checkpoint_dirs(trial_id)

    with_checkpoints = {t for t in trials.trial_id if checkpoint_dirs(sweep_dir, t)}
    best3 = set(trials.nsmallest(3, "best_value").trial_id)
    assert with_checkpoints == best3
    assert all(len(checkpoint_dirs(sweep_dir, t)) <= 2 for t in best3)
    assert trials.set_index("trial_id").checkpoint.drop(list(best3)).isna().all()

    # Tune's own per-trial files are there; its TensorBoard files are not (the tables hold
    # the same reports), and Tune's logger switch is as it was before the sweep.
    import os

    folders = list(SweepDir(sweep_dir).tune.glob("hpsearch_trial_*"))
    assert len(folders) == 6
    for folder in folders:
        assert {"params.json", "result.json", "progress.csv"} <= {f.name for f in folder.iterdir()}
        assert not list(folder.glob("events.out.tfevents*")), folder
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in os.environ

    manifest = (sweep_dir / "manifest.json").read_text()
    assert '"status": "finished"' in manifest
    assert (sweep_dir / "space.yaml").exists()

    # Nothing of one trial reached the next on the warm group: the last trial's reports
    # equal, bit for bit, the same configuration trained on fresh workers.
    from hpsearch.driver.trials.single import run_single

    last = by_start.iloc[-1]
    warm = history[history.trial_id == last.trial_id].sort_values("step")
    config = spec.trial_config({"lr": last.lr, "precision": last.precision})
    cold = run_single(spec, config, workers=2)[: len(warm)]
    for key in ("step", "train_loss", "val_loss", "val_accuracy", "grad_norm"):
        assert list(warm[key]) == [r[key] for r in cold], key


ONE_WORKER_SPACE = """\
    name: ctrl-c
    trainable: digits
    objective: {metric: val_loss, mode: min}
    params:
      lr: {type: float, low: 1.0e-3, high: 1.0e-1, log: true}
      batch_size: 64
    search:    {algorithm: random, seed: 0}
    scheduler: {type: fifo, max_t: 40}
    trials:    {num: 4, max_concurrent: 1}
    resources: {workers: 1, cpus_per_worker: 1}
"""


def test_ctrl_c_in_process_stops_the_sweep_and_its_caller(tmp_path, ray_instance, monkeypatch):
    """Tune takes the first Ctrl-C to stop the sweep gracefully; run_sweep then raises an
    error that is also a KeyboardInterrupt, so the caller (a loop of sweeps, this test
    session) stops too, and the tables hold the trial that ran. (With HPSEARCH_TENSORBOARD
    set, the trial's folder has Tune's TensorBoard files too.)"""
    import os
    import signal
    import threading
    import time

    from hpsearch.driver.sweep.result import Interrupted

    monkeypatch.setenv("HPSEARCH_TENSORBOARD", "1")
    spec = load_space(write_space(tmp_path, ONE_WORKER_SPACE))
    sweep = SweepDir.at(tmp_path / "runs", "ctrl-c")
    done = threading.Event()

    def press_ctrl_c_once_training():
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            try:
                if len(hpsearch.read_history(sweep.path)):
                    os.kill(os.getpid(), signal.SIGINT)
                    return
            except Exception:  # noqa: BLE001 - not written yet
                pass
            time.sleep(0.2)

    presser = threading.Thread(target=press_ctrl_c_once_training, daemon=True)
    presser.start()
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            run_sweep(spec, storage=str(tmp_path / "runs"))
    finally:
        done.set()
        presser.join()
    assert isinstance(caught.value, Interrupted), repr(caught.value)
    assert "hpsearch resume ctrl-c" in str(caught.value)
    trials = hpsearch.read_trials(sweep.path)
    assert len(trials) >= 1 and len(trials) < 4
    assert list(sweep.tune.glob("hpsearch_trial_*/events.out.tfevents*"))
