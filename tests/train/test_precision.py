import pytest
import torch

from hpsearch.train import LocalSession, train
from hpsearch.train.precision import PRECISIONS, Precision, unsupported_reason
from hpsearch.workloads import digits

CPU = torch.device("cpu")


@pytest.mark.parametrize(("name", "dtype"), [("fp32", torch.float32), ("bf16", torch.bfloat16),
                                             ("fp16", torch.float16)])
def test_autocast_runs_matmuls_in_the_precision_dtype(name, dtype):
    layer = torch.nn.Linear(4, 4)
    with Precision(name, "cpu").autocast():
        out = layer(torch.randn(2, 4))
    assert out.dtype == dtype


def test_grad_scaler_is_enabled_for_fp16_only():
    enabled = {p: Precision(p, "cpu").grad_scaler().is_enabled() for p in PRECISIONS}
    assert enabled == {"fp32": False, "tf32": False, "bf16": False, "fp16": True}
    assert Precision("fp16", "cpu").grad_scaler(init_scale=1024.0).get_scale() == 1024.0


def test_cpu_grad_scaler_skips_an_overflowing_step_and_halves_the_scale():
    layer = torch.nn.Linear(4, 4)
    before = layer.weight.detach().clone()
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    scaler = Precision("fp16", "cpu").grad_scaler(init_scale=2.0**40)
    with Precision("fp16", "cpu").autocast():
        loss = layer(torch.randn(8, 4)).float().sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert torch.equal(layer.weight, before)  # skipped
    assert scaler.get_scale() == 2.0**39


def test_this_cpu_runs_every_precision_but_the_gpu_one():
    reasons = {p: unsupported_reason(p, CPU) for p in PRECISIONS}
    assert reasons.pop("tf32").startswith("tf32 is a CUDA GPU format")
    assert reasons == {"fp32": None, "bf16": None, "fp16": None}


def test_unknown_precision_is_a_config_error():
    with pytest.raises(ValueError, match="precision: must be one of fp32, tf32, bf16, fp16"):
        unsupported_reason("fp8", CPU)


def test_use_gpu_without_cuda_trains_on_the_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    session = LocalSession()
    result = train({"lr": 3e-3, "epochs": 1, "use_gpu": True}, digits.WORKLOAD, session)
    assert result.status == "completed" and session.reports[0]["peak_mem_mb"] is None


def test_session_disagreeing_with_torch_distributed_is_refused():
    with pytest.raises(RuntimeError, match="session says rank 1 of 2"):
        train({"lr": 3e-3, "epochs": 1}, digits.WORKLOAD, LocalSession(world_rank=1, world_size=2))
