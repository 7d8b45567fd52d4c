"""charlm whose process dies once in a sweep: the injected worker failure of ``gpu_check.py``.

Used as ``trainable: benchmarks._dies_once:WORKLOAD``. The config keys ``die_once_file``
(a path) and ``die_at_step`` (a training step counted from the process's start) arm it:
the first trial of the sweep to reach that step creates the file, writes its ``lr`` and
pid into it, and ends its process with ``os._exit(1)``, as a worker killed by the kernel
would end, with no exception and no cleanup. Every later trial, and the retried one, sees
the file and trains on. The file is created with ``O_EXCL``, so exactly one trial dies
even when several reach the step at once.
"""

from __future__ import annotations

import json
import os

from hpsearch.train.workload import Workload
from hpsearch.workloads import charlm

_state: dict = {}


def build_data(config: dict):
    _state.update(file=config.get("die_once_file"), at=int(config.get("die_at_step", 0)),
                  lr=config.get("lr"), steps=0)
    return charlm.build_data(config)


def loss(model, batch):
    if model.training and _state.get("file"):
        _state["steps"] += 1
        if _state["steps"] == _state["at"]:
            try:
                fd = os.open(_state["file"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, json.dumps({"lr": _state["lr"], "pid": os.getpid()}).encode())
                os.close(fd)
                os._exit(1)
    return charlm.WORKLOAD.compute_loss(model, batch)


WORKLOAD = Workload(build_model=charlm.build_model, build_data=build_data, loss=loss,
                    metrics=charlm.WORKLOAD.metrics, description="charlm that dies once")
