"""Record real learning curves of the built-in workloads, for replaying searches (#25).

No benchmark suite installable here ships learning curves for deep-learning
hyperparameters (they download theirs at run time), so hpsearch records its own: every
evaluation of a dense sample of the space a shipped space file searches, each
configuration trained with several training seeds to the space's ``max_t``, through the
harness (``hpsearch.train.train``), the code a sweep's trials run.

The sample is Optuna's scrambled Sobol sequence (``QMCSampler``) over the space as the
sweep defines it (``driver.search.space.define_by_run``: the same ranges, log scales,
steps and conditions), so configuration ``i`` is the same on every run of this script:
the table is resumable. Each (configuration, seed) already in ``--out`` is skipped;
``--minutes`` stops cleanly after that long, so a long recording is spread over runs.

Each row is one evaluation: ``workload``, ``config_id``, ``seed``, the parameters, the
scheduler's time attribute (``epoch``), ``step``, ``value`` (the objective), the other
metrics the harness reports (``train_loss``, ``samples_per_s``), ``elapsed_s`` (seconds
since the run started, building included: what a replay counts as a trial's time) and
``status`` (``running``; the last row of a run says how it ended). Runs are spread over
``--procs`` processes of one torch thread each, so every run is timed under the same load.
The table's Parquet metadata names the machine (``hpsearch.recorded_on``: the CPU, its
bf16/fp16 units, the torch build, ``--procs``), and a recording refuses to extend a table
another machine recorded: autocast's bf16 and fp16 run 5x apart between CPUs with and
without AVX-512 FP16, and a replay counts each run's seconds as the trial's time.

    .venv/bin/python benchmarks/record_curves.py --space search_spaces/quickstart.yaml \\
        --configs 300 --seeds 3 --out benchmarks/data/curves-digits.parquet
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KEEP = ("step", "train_loss", "samples_per_s", "status")
MACHINE_KEY = b"hpsearch.recorded_on"


def machine() -> str:
    """What a run's seconds depend on: the CPU (its model and the bf16/fp16 units torch's
    autocast uses), the torch build and the number of processes sharing the machine."""
    import platform

    import torch

    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    units = ",".join(sorted(flags & {"amx_bf16", "amx_fp16", "avx512_bf16", "avx512_fp16"}))
    return f"{cpu} [{units or 'no bf16/fp16 units'}]; torch {torch.__version__}"


def recorded_on(out: Path) -> str | None:
    """The machine a table was recorded on (None for a table that does not say)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(out).metadata or {}
    return meta[MACHINE_KEY].decode() if MACHINE_KEY in meta else None


def configs(space: str, n: int, sample_seed: int = 0) -> list[dict]:
    """The first ``n`` configurations of the Sobol sample of ``space`` (always the same)."""
    import warnings

    import optuna

    from hpsearch.driver.search.space import define_by_run
    from hpsearch.space import load_space

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    spec = load_space(space)
    sampler = optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=sample_seed,
                                         warn_independent_sampling=False)
    study = optuna.create_study(sampler=sampler)
    define = define_by_run(spec)
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(define(trial))
        study.tell(trial, 0.0)
    return out


def run_one(job: tuple[str, int, int, dict]) -> list[dict]:
    """Train one configuration with one seed; every report as a row."""
    import torch

    from hpsearch.space import load_space
    from hpsearch.train import LocalSession, train
    from hpsearch.workloads.resolve import load_trainable

    torch.set_num_threads(1)
    space, config_id, seed, params = job
    spec = load_space(space)
    metric, time_key = spec.objective.metric, spec.scheduler.result_key
    rows = []
    started = time.perf_counter()

    def on_report(report: dict) -> None:
        rows.append({"workload": spec.trainable, "config_id": config_id, "seed": seed,
                     **params, time_key: report.get(time_key), "value": report.get(metric),
                     **{k: report.get(k) for k in KEEP},
                     "elapsed_s": time.perf_counter() - started})

    config = {**spec.trial_config(params), "seed": seed}
    train(config, load_trainable(spec.trainable), LocalSession(on_report=on_report))
    return rows


def write(rows: list[dict], out: Path, on: str) -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    table = pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           MACHINE_KEY: on.encode()})
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, out)


def record(space: str, out: Path, *, n_configs: int, seeds: int, procs: int,
           minutes: float | None, flush_every: int = 20) -> dict:
    """Add to ``out`` the runs it lacks; returns what was done.

    A run's ``elapsed_s`` is what a replay counts as its time, so one table holds the runs
    of one machine: extending a table that another CPU or torch build recorded raises.
    """
    import pandas as pd

    on = f"{machine()}; {procs} process(es)"
    if out.exists() and recorded_on(out) not in (None, on):
        raise SystemExit(f"{out} was recorded on {recorded_on(out)}, not on this machine "
                         f"({on}): its runs' seconds would not compare. Record to a new "
                         f"--out, or run this where the table was recorded.")
    rows = pd.read_parquet(out).to_dict("records") if out.exists() else []
    done = {(r["config_id"], r["seed"]) for r in rows}
    jobs = [(space, i, s, params) for i, params in enumerate(configs(space, n_configs))
            for s in range(seeds) if (i, s) not in done]
    started, ran = time.monotonic(), 0
    deadline = started + minutes * 60 if minutes else None
    with mp.get_context("spawn").Pool(procs) as pool:
        for result in pool.imap(run_one, jobs):
            rows += result
            ran += 1
            if ran % flush_every == 0:
                write(rows, out, on)
            if deadline is not None and time.monotonic() > deadline:
                pool.terminate()
                break
    write(rows, out, on)
    return {"ran": ran, "left": len(jobs) - ran, "rows": len(rows),
            "seconds": time.monotonic() - started, "mb": out.stat().st_size / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="search_spaces/quickstart.yaml")
    parser.add_argument("--configs", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per configuration")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    done = record(args.space, args.out, n_configs=args.configs, seeds=args.seeds,
                  procs=args.procs, minutes=args.minutes)
    print(f"{args.out}: {done['ran']} runs in {done['seconds']:.0f} s, {done['left']} left; "
          f"{done['rows']} rows, {done['mb']:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
