"""Which GPU a worker trains on, what its reports say about it, and what
``HPSEARCH_SIMULATE_GPU=1`` changes, without Ray running (the simulated cluster itself is
in ``tests/cli/test_gpu_cluster.py``)."""

from __future__ import annotations

import io

import pytest

from hpsearch.driver.cluster.preflight import SIMULATE_GPU_ENV, say_gpu_simulation
from hpsearch.driver.trials.gpus import (
    cuda_device_index,
    require_cuda_if_asked,
    with_every_workers_gpus,
)
from hpsearch.driver.trials.runners import InProcessRunner, TrainRunner, harness_worker_loop
from hpsearch.space import parse_space


def space(**resources) -> dict:
    return {"name": "g", "trainable": "digits", "objective": {"metric": "val_loss", "mode": "min"},
            "params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
            "resources": {"use_gpu": True, **resources}}


@pytest.mark.parametrize("gpu_ids, visible, expected", [
    ([0], "0", 0),              # a Tune actor holding one GPU sees only it
    ([3], "2,3", 1),            # Ray Train shows a node's workers all their GPUs
    (["3"], "2,3", 1),          # ids come as ints or strings
    ([0], "0", 0),              # one-worker trials sharing GPU 0 (0.5 each): cuda:0
    ([2, 3], "0,1,2,3", 2),     # several GPUs per worker: the first one
    ([], "0,1", None),          # no GPU assigned
    ([3], None, 3),             # CUDA_VISIBLE_DEVICES unset: every GPU visible, by its id
    ([3], "", 3),
])
def test_a_worker_trains_on_the_gpu_ray_assigned_it(gpu_ids, visible, expected):
    assert cuda_device_index(gpu_ids, visible) == expected


@pytest.mark.parametrize("gpu_ids, visible", [
    ([5], "0,1"),   # CUDA_VISIBLE_DEVICES changed by someone else
    ([2], "0"),     # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1 with a partial list
    (["GPU-uuid"], None),
])
def test_a_gpu_ray_assigned_but_this_process_cannot_see_is_one_clear_error(gpu_ids, visible):
    with pytest.raises(ValueError) as err:
        cuda_device_index(gpu_ids, visible)
    message = str(err.value)
    assert "\n" not in message and f"GPU {gpu_ids[0]}" in message
    assert "CUDA_VISIBLE_DEVICES" in message
    assert "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES" in message


def test_the_harness_refuses_a_gpu_it_cannot_see_instead_of_training_elsewhere(monkeypatch):
    import torch

    from hpsearch.train.devices import worker_device

    # The runner's reason reaches the harness as the device index; on a GPU it is raised,
    # never replaced by the local rank's cuda:N. (Without CUDA the trial trains on the CPU
    # and require_cuda_if_asked has refused use_gpu already.)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    reason = "Ray assigned GPU 5 to this worker, but CUDA_VISIBLE_DEVICES is '0,1'"
    with pytest.raises(RuntimeError, match="GPU 5"):
        worker_device(True, reason, local_rank=0)
    with pytest.raises(RuntimeError, match=r"cuda:3 .*torch sees 2 GPU.*CUDA_VISIBLE_DEVICES"):
        worker_device(True, 3, local_rank=0)
    assert worker_device(False, reason, local_rank=0) == torch.device("cpu")


def test_rank_zeros_report_carries_every_workers_gpus_in_rank_order():
    reports = [{"val_loss": 1.0, "gpu_ids": "2", "cuda_visible_devices": "2,3"},
               {"val_loss": 1.0, "gpu_ids": "3", "cuda_visible_devices": "2,3"}]
    first = with_every_workers_gpus(reports)
    assert first == {"val_loss": 1.0, "gpu_ids": "2;3", "cuda_visible_devices": "2,3;2,3"}
    assert reports[0]["gpu_ids"] == "2"  # the workers' own reports are left alone
    assert with_every_workers_gpus([{"val_loss": 1.0}, {"val_loss": 1.0}]) == {
        "val_loss": 1.0}


def test_simulated_gpus_train_on_the_cpu_and_keep_their_reservation(monkeypatch):
    monkeypatch.setenv(SIMULATE_GPU_ENV, "1")
    one = InProcessRunner(parse_space(space(gpus_per_worker=0.5)))
    assert one.simulate_gpu and one.config({"lr": 0.01})["use_gpu"] is False
    assert one.tune_resources == {"CPU": 1, "GPU": 0.5}
    require_cuda_if_asked(one.config({"lr": 0.01}))  # no refusal on a CPU torch

    many = TrainRunner(parse_space(space(workers=2)), harness=True, n_workers=2)
    assert many.simulate_gpu
    trainer = many.trainer(harness_worker_loop, {"config": many.config({"lr": 0.01})},
                           run_config=None)
    assert trainer.backend_config.backend == "gloo"
    assert trainer.scaling_config.use_gpu is True
    assert trainer.scaling_config.resources_per_worker == {"CPU": 1, "GPU": 1}


def test_without_the_switch_gpu_trials_ask_for_cuda(monkeypatch):
    monkeypatch.delenv(SIMULATE_GPU_ENV, raising=False)
    many = TrainRunner(parse_space(space(workers=2)), harness=True, n_workers=2)
    assert not many.simulate_gpu and many.config({"lr": 0.01})["use_gpu"] is True
    trainer = many.trainer(harness_worker_loop, {"config": many.config({"lr": 0.01})},
                           run_config=None)
    assert trainer.backend_config.backend == "nccl"
    one = InProcessRunner(parse_space(space()))
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        with pytest.raises(Exception, match="sees no CUDA device"):
            require_cuda_if_asked(one.config({"lr": 0.01}))


def test_every_run_a_simulation_affects_says_so(monkeypatch):
    """The line; the manifest's note is the record's (test_sweep_record)."""
    out = io.StringIO()
    monkeypatch.setenv(SIMULATE_GPU_ENV, "1")
    assert say_gpu_simulation(parse_space(space()), out) is True
    assert "SIMULATED GPUs (HPSEARCH_SIMULATE_GPU=1, for tests)" in out.getvalue()
    cpu_sweep = {**space(), "resources": {"use_gpu": False}}
    assert say_gpu_simulation(parse_space(cpu_sweep), out) is False  # nothing simulated
    monkeypatch.delenv(SIMULATE_GPU_ENV)
    assert say_gpu_simulation(parse_space(space()), out) is False
    assert out.getvalue().count("SIMULATED") == 1


def test_a_stopped_trials_model_is_gone_when_its_memory_is_released(monkeypatch):
    """Tune stops a trial with SystemExit out of its report; the release must come after
    the exception (and the model its traceback holds) is gone."""
    import gc
    import weakref

    import pytest

    from hpsearch.driver.trials import runners
    from hpsearch.train.session import LocalSession
    from hpsearch.workloads.digits import WORKLOAD

    models: list = []

    class Tracked:
        def __getattr__(self, name):
            return getattr(WORKLOAD, name)

        def build_model(self, config):
            model = WORKLOAD.build_model(config)
            models.append(weakref.ref(model))
            return model

    class Stopping(LocalSession):
        def report(self, metrics, checkpoint_dir=None):
            super().report(metrics, checkpoint_dir)
            raise SystemExit(0)  # as tune.report does once Tune stopped the trial

    alive_at_release: list = []

    def release():
        gc.collect()
        alive_at_release.append([ref() is not None for ref in models])

    monkeypatch.setattr(runners, "release_cached_gpu_memory", release)
    with pytest.raises(SystemExit):
        runners.train_then_release({"lr": 3e-3, "epochs": 3}, Tracked(), Stopping())
    assert alive_at_release == [[False]]


def test_a_cold_trial_that_hung_twice_is_not_retried_again(tmp_path):
    """Attempts of one Ray Train run, as its rank 0 sees them: quick failures are retried
    (Ray Train's max_failures), the first hang too, the second hang fails at once."""
    from hpsearch.driver.trials.runners import HangLedger

    ledger = HangLedger(str(tmp_path / "train-t1" / HangLedger.FILE), timeout_s=600)
    ledger.attempt_starts(now=0)       # first attempt
    ledger.heard(now=100)              # a report
    ledger.attempt_starts(now=130)     # failed 30 s after it: not a hang
    ledger.heard(now=200)
    ledger.attempt_starts(now=200 + 600 + 20)  # silent for the collective timeout: hang 1
    ledger.heard(now=900)
    with pytest.raises(RuntimeError, match="hung 2 times: silent for "
                                           r"resources.collective_timeout \(600 s\)"):
        ledger.attempt_starts(now=900 + 601)   # hang 2: fails, without training again
    with pytest.raises(RuntimeError, match="hung 2 times"):
        ledger.attempt_starts(now=1600)  # every later attempt too, in seconds
    ledger.reset()  # resumed a day later: the silence while the driver was down is no hang
    ledger.attempt_starts(now=90_000)
    ledger.attempt_starts(now=90_010)
