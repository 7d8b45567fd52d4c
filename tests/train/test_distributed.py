"""Two CPU processes with gloo, the way Ray Train runs a 2-worker trial (without Ray)."""

import os

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


def _worker(rank, world_size, root):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{root}/rendezvous", rank=rank, world_size=world_size)
    try:
        out = {}

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
        torch.save(out, os.path.join(root, f"out{rank}.pt"))
    finally:
        dist.destroy_process_group()


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
