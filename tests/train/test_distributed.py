"""Two CPU processes with gloo, the way Ray Train runs a 2-worker trial (without Ray).

The workers must leave no gloo thread behind when they exit. The first
DistributedDataParallel built in a process imports torch._dynamo, and through it
torch.distributed.nn.functional, whose functions take ``group=group.WORLD`` as a default
argument. Imported while a process group exists, those defaults hold that group, so
``destroy_process_group()`` no longer frees it: its gloo threads keep running and the group
is torn down only while the interpreter shuts down, where it can abort the worker
("terminate called without an active exception", SIGABRT; pytorch/pytorch#65231 is the
same crash). So the workers import torch._dynamo before they create the group, and
``test_destroy_process_group_stops_the_gloo_threads`` checks that nothing holds it.
"""

import importlib
import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hpsearch.train import LocalSession, train
from hpsearch.workloads import digits

from .conftest import comparable

CONFIG = {"lr": 3e-3, "epochs": 2, "batch_size": 64, "warmup_steps": 5, "weight_decay": 0.1}


class Interrupted(Exception):
    pass


def _gloo_threads(wait_s: float = 5.0) -> list[str] | None:
    """Names of this process's gloo threads; None where there is no /proc (not Linux).

    Waits up to ``wait_s`` for threads that are just ending to leave /proc; threads of a
    group that is still alive never leave, so waiting cannot hide one.
    """
    if not os.path.isdir("/proc/self/task"):
        return None
    deadline = time.monotonic() + wait_s
    while True:
        names = []
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    names.append(f.read().strip())
            except OSError:  # the thread ended while we listed it
                pass
        left = sorted(n for n in names if "gloo" in n)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _worker(rank, world_size, root):
    torch.set_num_threads(1)
    # Before the group exists: see the module docstring.
    importlib.import_module("torch._dynamo")
    dist.init_process_group("gloo", init_method=f"file://{root}/rendezvous", rank=rank, world_size=world_size)
    out = {}
    try:
        def session(name, **kwargs):
            return LocalSession(root=os.path.join(root, f"{name}-rank{rank}"), world_rank=rank,
                                world_size=world_size, local_rank=rank, **kwargs)

        straight = session("straight")
        train(CONFIG, digits.WORKLOAD, straight)
        out["straight"] = straight.reports

        # Dropout draws from each rank's own generator: a resume must restore all of them.
        config = {**CONFIG, "dropout": 0.3}
        reference = session("reference")
        train(config, digits.WORKLOAD, reference)
        out["reference"] = reference.reports

        def stop_after_first(metrics):
            raise Interrupted

        first = session("first", on_report=stop_after_first)
        try:
            train(config, digits.WORKLOAD, first)
        except Interrupted:
            pass
        dist.barrier()
        rank0_checkpoint = os.path.join(root, "first-rank0", "checkpoint_000000")
        second = session("second", resume_from=rank0_checkpoint)
        train(config, digits.WORKLOAD, second)
        out["resumed"] = first.reports + second.reports
        kept = os.path.join(root, f"straight-rank{rank}")
        out["kept"] = sorted(os.listdir(kept)) if os.path.isdir(kept) else []
    finally:
        dist.destroy_process_group()
    out["gloo_threads_after_destroy"] = _gloo_threads()
    torch.save(out, os.path.join(root, f"out{rank}.pt"))


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ddp"))
    mp.start_processes(_worker, args=(2, root), nprocs=2, join=True, start_method="spawn")
    return [torch.load(os.path.join(root, f"out{r}.pt"), weights_only=False) for r in range(2)]


def test_two_gloo_workers_match_one_worker_at_the_same_global_batch(two_workers):
    single = LocalSession()
    train(CONFIG, digits.WORKLOAD, single)
    ddp = two_workers[0]["straight"]
    assert [r["step"] for r in ddp] == [r["step"] for r in single.reports] == [22, 44]
    for a, b in zip(single.reports, ddp):
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-4)
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
        assert b["val_accuracy"] == pytest.approx(a["val_accuracy"], abs=1 / 359 + 1e-9)


def test_every_rank_reports_the_same_metrics(two_workers):
    assert comparable(two_workers[0]["straight"]) == comparable(two_workers[1]["straight"])


def test_only_rank_zero_hands_over_checkpoints(two_workers):
    assert two_workers[0]["kept"] == ["checkpoint_000000", "checkpoint_000001"]
    assert two_workers[1]["kept"] == []


def test_ddp_resume_matches_uninterrupted_run_on_every_rank(two_workers):
    for rank in (0, 1):
        assert comparable(two_workers[rank]["resumed"]) == comparable(two_workers[rank]["reference"])


def test_destroy_process_group_stops_the_gloo_threads(two_workers):
    # A group that outlives destroy_process_group() is torn down at interpreter exit,
    # where it can abort the worker by chance; here it fails every time instead.
    for rank in (0, 1):
        left = two_workers[rank]["gloo_threads_after_destroy"]
        if left is None:
            pytest.skip("no /proc to list threads in")
        assert left == [], f"rank {rank}: gloo threads still running after destroy_process_group: {left}"
