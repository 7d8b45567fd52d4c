"""TF32 is set on every trial, from the trial's own precision, in a process that ran other
trials (or user code that set it) before."""

from __future__ import annotations

import torch

from hpsearch.train.loop import train
from hpsearch.train.precision import Precision, set_tf32, unsupported_reason
from hpsearch.train.session import LocalSession
from hpsearch.workloads.digits import WORKLOAD


def matmul_tf32() -> bool:
    return torch.backends.cuda.matmul.fp32_precision == "tf32"


def test_an_fp32_trial_turns_off_what_an_earlier_one_turned_on():
    set_tf32(True)  # as a tf32 trial (or a trainable's own code) left the process
    assert matmul_tf32() and torch.backends.cudnn.fp32_precision == "tf32"
    session = LocalSession()
    result = train({"lr": 3e-3, "epochs": 1, "precision": "fp32"}, WORKLOAD, session)
    assert result.status == "completed"
    assert not matmul_tf32() and torch.backends.cudnn.fp32_precision == "ieee"
    assert {r["fp32_matmul"] for r in session.reports} == {"ieee"}


def test_tf32_is_a_cuda_precision():
    assert Precision("tf32", "cuda").tf32 and not Precision("tf32", "cpu").tf32
    assert not Precision("bf16", "cuda").tf32 and not Precision("fp32", "cuda").tf32
    reason = unsupported_reason("tf32", torch.device("cpu"))
    assert reason is not None and "use fp32" in reason
    set_tf32(True)
    session = LocalSession()
    result = train({"lr": 3e-3, "epochs": 1, "precision": "tf32"}, WORKLOAD, session)
    assert result.status == "unsupported_precision"  # on the CPU, one report saying why
    assert not matmul_tf32()  # and the flags were still set from the trial: off
