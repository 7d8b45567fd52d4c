"""``hpsearch doctor``'s real collective: one all-reduce between a process on every node.

A cluster whose nodes cannot form a process group (NCCL on an interface that does not
connect them, a firewall between them, InfiniBand misconfigured) trains every one-node
trial and hangs every trial that spans nodes. The doctor finds that before a sweep: one
process per node (an actor pinned to it; with GPUs on every node, one GPU each and NCCL,
else gloo) joins a process group rooted on the head and all-reduces a one-element tensor,
within a bound. The answer is one line: how long it took, or what failed and what to set.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Peer", "all_reduce_between_nodes"]


class Peer:
    """One node's process of the doctor's process group (a Ray actor)."""

    def address(self) -> tuple[str, int]:
        """This node's address and a port nothing listens on now: the group's root."""
        import ray

        from hpsearch.driver.cluster.connect import free_port

        return ray.util.get_node_ip_address(), free_port()

    def all_reduce(self, master: tuple[str, int], rank: int, world: int, backend: str,
                   within_s: float) -> dict[str, Any]:
        import datetime

        import torch
        import torch.distributed as dist

        started = time.monotonic()
        try:
            dist.init_process_group(backend, init_method=f"tcp://{master[0]}:{master[1]}",
                                    rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=within_s))
            try:
                device = "cuda" if backend == "nccl" else "cpu"
                ones = torch.ones(1, device=device)
                dist.all_reduce(ones, async_op=True).wait(
                    timeout=datetime.timedelta(seconds=within_s))
                total = int(ones.item())
            finally:
                dist.destroy_process_group()
        except Exception as exc:  # noqa: BLE001 - the answer is the error, as one line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            return {"error": f"{type(exc).__name__}: {first}"}
        if total != world:
            return {"error": f"the all-reduce summed to {total}, not {world}"}
        return {"s": time.monotonic() - started}


def all_reduce_between_nodes(nodes: list[dict[str, Any]], *, within_s: float = 30.0
                             ) -> tuple[str | None, str | None]:
    """``(info line, problem line)`` of one all-reduce between all ``nodes`` (the doctor's
    node facts, head first); ``(None, None)`` with a single node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if len(nodes) < 2:
        return None, None
    gpus = all(n.get("ray_gpus", 0) >= 1 and (n.get("torch") or {}).get("cuda")
               for n in nodes)
    backend = "nccl" if gpus else "gloo"
    actor = ray.remote(Peer)
    peers = [actor.options(num_cpus=0, num_gpus=1 if gpus else 0, scheduling_strategy=
                           NodeAffinitySchedulingStrategy(n["node_id"], soft=False)).remote()
             for n in nodes]
    what = f"an all-reduce over {backend} between the {len(nodes)} nodes"
    try:
        try:  # every peer placed (a GPU free on each node, for NCCL) before the collective
            master = ray.get([p.address.remote() for p in peers], timeout=within_s + 30)[0]
        except ray.exceptions.GetTimeoutError:
            return (f"{what}: not run, a process could not start on every node within "
                    f"{within_s + 30:g} s (a sweep holding the GPUs?)"), None
        refs = [p.all_reduce.remote(master, rank, len(peers), backend, within_s)
                for rank, p in enumerate(peers)]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=within_s + 60)
        if len(ready) < len(refs):
            return None, f"{what} did not complete within {within_s:g} s. " + _ADVICE
        results = ray.get(refs)
    except Exception as exc:  # noqa: BLE001 - a node that cannot start the actor, say
        return None, f"{what} could not run: {type(exc).__name__}: {exc}"[:300]
    finally:
        for p in peers:
            ray.kill(p)
    errors = [f"node {n['node_id'][:8]}: {r['error']}" for n, r in zip(nodes, results)
              if "error" in r]
    if errors:
        return None, f"{what} failed ({'; '.join(errors)}). " + _ADVICE
    return f"{what} (rooted on {master[0]}): {max(r['s'] for r in results):.2f} s", None


_ADVICE = ("Trials that span nodes would hang or fail: set NCCL_SOCKET_IFNAME (or "
           "GLOO_SOCKET_IFNAME) to the interface the nodes reach each other on, open the "
           "ports between them, and NCCL_IB_DISABLE=1 without InfiniBand")
