"""TF32 is set on every trial, from the trial's own precision, in a process that ran other
trials (or user code that set it) before, and in a way that leaves every torch precision
getter readable afterwards: torch 2.13 refuses its legacy getters once the newer
``fp32_precision`` flags disagree with them, and inductor (``torch.compile``) reads them."""

from __future__ import annotations

import pytest
import torch

from hpsearch.train.loop import train
from hpsearch.train.precision import Precision, set_tf32, unsupported_reason
from hpsearch.train.session import LocalSession
from hpsearch.workloads.digits import WORKLOAD

#: Every precision getter torch 2.13 has, legacy and new: none may raise.
GETTERS = {
    "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
    "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "mkldnn.allow_tf32": lambda: torch.backends.mkldnn.allow_tf32,
    "fp32_precision": lambda: torch.backends.fp32_precision,
    "cuda.matmul.fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
    "cudnn.fp32_precision": lambda: torch.backends.cudnn.fp32_precision,
    "cudnn.conv.fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
    "cudnn.rnn.fp32_precision": lambda: torch.backends.cudnn.rnn.fp32_precision,
    "mkldnn.fp32_precision": lambda: torch.backends.mkldnn.fp32_precision,
    "mkldnn.matmul.fp32_precision": lambda: torch.backends.mkldnn.matmul.fp32_precision,
}


def read_every_getter() -> dict[str, object]:
    """Each getter's value; the ones that raise, as the error (the test fails on them)."""
    values = {}
    for name, getter in GETTERS.items():
        try:
            values[name] = getter()
        except RuntimeError as exc:
            values[name] = f"RAISES: {str(exc)[:80]}"
    return values


def assert_readable() -> dict[str, object]:
    values = read_every_getter()
    raising = {k: v for k, v in values.items() if str(v).startswith("RAISES")}
    assert not raising, raising
    return values


def tf32_state() -> tuple[bool, bool]:
    """(matmul, cuDNN) TF32 as the ops see it, read through both APIs, which must agree."""
    values = assert_readable()
    matmul = values["cuda.matmul.allow_tf32"]
    assert matmul == (values["cuda.matmul.fp32_precision"] == "tf32")
    assert matmul == (values["torch.get_float32_matmul_precision()"] != "highest")
    cudnn = values["cudnn.allow_tf32"]
    assert cudnn == (values["cudnn.conv.fp32_precision"] == "tf32") \
        == (values["cudnn.rnn.fp32_precision"] == "tf32")
    return matmul, cudnn


@pytest.fixture
def restore_torch_precision():
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def test_an_fp32_trial_turns_off_what_an_earlier_one_turned_on(restore_torch_precision):
    set_tf32(True)  # as a tf32 trial (or a trainable's own code) left the process
    assert tf32_state() == (True, True)
    session = LocalSession()
    result = train({"lr": 3e-3, "epochs": 1, "precision": "fp32"}, WORKLOAD, session)
    assert result.status == "completed"
    assert tf32_state() == (False, False)
    assert {r["fp32_matmul"] for r in session.reports} == {"ieee"}


def test_a_trial_repairs_flags_that_user_code_set_through_the_new_api(restore_torch_precision):
    # A trainable (or library) in the same process used the newer API only: torch then
    # refuses the legacy getters until both agree again.
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.fp32_precision = "ieee"
    with pytest.raises(RuntimeError):
        torch.get_float32_matmul_precision()
    result = train({"lr": 3e-3, "epochs": 1, "precision": "bf16"}, WORKLOAD, LocalSession())
    assert result.status == "completed"
    assert tf32_state() == (False, False)


def test_tf32_is_a_cuda_precision(restore_torch_precision):
    assert Precision("tf32", "cuda").tf32 and not Precision("tf32", "cpu").tf32
    assert not Precision("bf16", "cuda").tf32 and not Precision("fp32", "cuda").tf32
    reason = unsupported_reason("tf32", torch.device("cpu"))
    assert reason is not None and "use fp32" in reason
    set_tf32(True)
    session = LocalSession()
    result = train({"lr": 3e-3, "epochs": 1, "precision": "tf32"}, WORKLOAD, session)
    assert result.status == "unsupported_precision"  # on the CPU, one report saying why
    assert tf32_state() == (False, False)  # and the flags were still set from the trial: off


@pytest.mark.slow  # torch.compile's first CPU compile: about 30-60 s on 2 cores
def test_every_getter_reads_and_torch_compile_works_after_trials_of_every_precision(
        restore_torch_precision):
    # A CUDA tf32 trial's flags, as a GPU worker would have them (the flags are
    # process-wide, so this runs on a CPU build too), then harness trials of every
    # precision on the CPU, then a CUDA fp32 trial's flags: every state a reused worker
    # can be left in.
    states = []
    assert Precision("tf32", "cuda").apply() == "tf32"
    states.append(tf32_state())
    for precision in ("fp32", "tf32", "bf16", "fp16", "fp32"):
        result = train({"lr": 3e-3, "epochs": 1, "precision": precision}, WORKLOAD,
                       LocalSession())
        assert result.status in ("completed", "unsupported_precision")
        states.append(tf32_state())
        Precision("tf32", "cuda").apply()
        states.append(tf32_state())
    assert Precision("fp32", "cuda").apply() == "ieee"
    states.append(tf32_state())
    assert states == [(True, True), *[(False, False), (True, True)] * 5, (False, False)]

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    compiled = torch.compile(model)
    x = torch.randn(4, 8)
    assert torch.allclose(compiled(x), model(x), atol=1e-5)
    assert_readable()
