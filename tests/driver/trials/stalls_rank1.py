"""A harness trainable whose import stalls on rank 1 of a Ray Train worker group, as a
rank that never joins the group's first collective (a hung NFS mount, a data download on
one node). Imported by Ray workers as ``tests.driver.trials.stalls_rank1:WORKLOAD``."""

from __future__ import annotations

import time

import ray.train

from hpsearch.workloads.digits import WORKLOAD  # noqa: F401 - the trainable itself

#: Longer than the test's guard (3 s) many times over, shorter than a test's patience:
#: without the guard the trial would wait it out and complete.
STALL_S = 90


def _rank() -> int | None:
    try:
        return ray.train.get_context().get_world_rank()
    except RuntimeError:  # the driver, resolving the trainable: not a worker
        return None


if _rank() == 1:
    time.sleep(STALL_S)
