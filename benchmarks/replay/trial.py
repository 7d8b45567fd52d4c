"""The replay trainable: a command trial that answers its configuration from a curve table.

``benchmarks/replay/confirm.py`` runs it through ``hpsearch run`` as a command trainable:
it finds the recorded configuration nearest to its parameters (the surrogate the
simulator uses), takes one of its recorded seeds by the trial's ``{seed}`` and the sweep's
``--sweep-seed`` (``{seed}`` comes from the trial id alone, so without the sweep's seed
trial ``t00007`` of every sweep would get the same recorded seed, and the sweeps' noise
would be shared where the simulator draws it anew per replay), and prints
each evaluation as a JSON line when the recorded run reached it, time scaled so that
time(R) lasts ``--seconds-per-r`` seconds. Its start-up (Python, numpy, the pickled
table) is part of the trial's time, as a real script's imports are.

    python benchmarks/replay/trial.py --book BOOK.pkl --seconds-per-r 3 --seed 7 --sweep-seed 0 \\
        --param lr=0.003 --param warmup_steps=10 --param precision=fp32
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
import zlib
from pathlib import Path

started = time.monotonic()
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--book", type=Path, required=True, help="(table, surrogate) pickle")
    parser.add_argument("--seconds-per-r", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0, help="the trial's {seed}")
    parser.add_argument("--sweep-seed", type=int, default=0, help="the sweep's search.seed")
    parser.add_argument("--metric", default="val_loss")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    params = {k: _value(v) for k, v in (p.split("=", 1) for p in args.param)}
    with args.book.open("rb") as f:
        table, surrogate = pickle.load(f)
    config = surrogate.nearest(params)
    seeds = table.seeds[config]
    drawn = zlib.crc32(f"{args.sweep_seed}:{args.seed}".encode())
    values = table.values[(config, seeds[drawn % len(seeds)])]
    scale = args.seconds_per_r / table.time_r
    for epoch, (value, at) in enumerate(zip(values, table.times[config]), 1):
        time.sleep(max(0.0, started + at * scale - time.monotonic()))
        print(json.dumps({"epoch": epoch, args.metric: value, "config_id": config}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
