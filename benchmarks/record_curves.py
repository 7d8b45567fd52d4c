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


def write(rows: list[dict], out: Path) -> None:
    import pandas as pd

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    pd.DataFrame(rows).to_parquet(tmp, index=False, compression="zstd")
    os.replace(tmp, out)


def record(space: str, out: Path, *, n_configs: int, seeds: int, procs: int,
           minutes: float | None, flush_every: int = 20) -> dict:
    """Add to ``out`` the runs it lacks; returns what was done."""
    import pandas as pd

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
                write(rows, out)
            if deadline is not None and time.monotonic() > deadline:
                pool.terminate()
                break
    write(rows, out)
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
