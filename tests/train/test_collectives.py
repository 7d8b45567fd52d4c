"""The loop's own collectives over a real two-process gloo group: the first all-reduce
fails fast, in one line, when a rank never joins; rank 0's choice reaches every rank; every
rank gets the ranks' mean GPU utilisation."""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hpsearch.train.devices import first_collective, from_rank0
from hpsearch.train.utilization import util_over_ranks


def _worker(rank: int, port: int, case: str, out: "mp.Queue", gave_up: "mp.Event") -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        if case == "absent" and rank == 1:
            # Never joins the first all-reduce: stays away until rank 0 has given up on
            # it, or 45 s (the group's own timeout is 60 s), and says which came first.
            out.put((rank, "rank 0 gave up first", gave_up.wait(timeout=45)))
            return
        try:
            first_collective(torch.device("cpu"), 2, within_s=2)
            out.put((rank, "ok", None))
        except RuntimeError as exc:
            out.put((rank, str(exc), None))
            return
        finally:
            gave_up.set()
        # Each rank "lists" the checkpoint folder differently; rank 0's answer wins.
        out.put((rank, "choice", from_rank0(f"checkpoint_{9 - rank}", 2)))
        # gpu_util_pct's mean over ranks: 90 and 60; 30 and a rank without NVML; neither.
        cpu = torch.device("cpu")
        out.put((rank, "util", (util_over_ranks([90.0, 60.0][rank], cpu, 2),
                                util_over_ranks([30.0, None][rank], cpu, 2),
                                util_over_ranks(None, cpu, 2))))
    finally:
        if case != "absent":
            dist.destroy_process_group()


def run(case: str) -> list[tuple]:
    from hpsearch.driver.cluster.connect import free_port

    ctx = mp.get_context("spawn")
    out, gave_up = ctx.Queue(), ctx.Event()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, case, out, gave_up)) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=90)
    found = []
    while not out.empty():
        found.append(out.get())
    return sorted(found, key=str)


def test_the_first_all_reduce_passes_and_rank_0_chooses_the_checkpoint():
    found = run("both")
    assert [f[:2] for f in found if f[1] == "ok"] == [(0, "ok"), (1, "ok")]
    assert {f[2] for f in found if f[1] == "choice"} == {"checkpoint_9"}
    assert [f for f in found if f[1] == "util"] == [(0, "util", (75.0, 30.0, None)),
                                                     (1, "util", (75.0, 30.0, None))], found


def test_a_rank_that_never_joins_fails_the_first_all_reduce_in_seconds():
    found = run("absent")
    assert len(found) == 2, found
    (rank, message, _), waited = found
    assert rank == 0 and waited == (1, "rank 0 gave up first", True), found
    assert message.startswith("the first all-reduce between the 2 workers did not complete "
                              "within 2 s") and "NCCL_SOCKET_IFNAME" in message
