"""Study storage: what does each Optuna storage cost the sweep's driver?

The driver writes the study from Tune's loop: one ``ask``, a report per result and a
``tell`` per trial, so the storage's write latency is the driver's. This plays a sweep's
study traffic (per trial: ask, suggest the charlm space with its conditional parameter,
a ``trial_id`` attribute, ``--reports`` reports, tell; 1/3 COMPLETE, 2/3 PRUNED) against
SQLite (``RDBStorage``) and Optuna's journal file storage (``JournalFileBackend``, with its
default symlink lock, the one hpsearch and optuna-dashboard use, and the open lock), on a
local temporary directory, then loads the study again as a reader would.

    .venv/bin/python benchmarks/study_storage.py --trials 100 --sampler random
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock


def space(trial: optuna.Trial) -> None:
    precision = trial.suggest_categorical("precision", ["fp32", "bf16", "fp16"])
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    trial.suggest_int("warmup_steps", 0, 64, step=16)
    trial.suggest_float("weight_decay", 0.0, 0.1)
    if precision == "fp16":
        trial.suggest_float("loss_scale_init", 1024, 65536, log=True)


def storage(kind: str, root: str) -> optuna.storages.BaseStorage:
    if kind == "sqlite":
        return RDBStorage(f"sqlite:///{root}/optuna.db")
    path = f"{root}/optuna.journal"
    if kind == "journal (open lock)":
        return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))
    return JournalStorage(JournalFileBackend(path))


def sampler(kind: str) -> optuna.samplers.BaseSampler:
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=0)
    return optuna.samplers.TPESampler(seed=0, n_startup_trials=10, group=True)


def run(kind: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="hpsearch-storage-") as root:
        study = optuna.create_study(storage=storage(kind, root), study_name="b",
                                    sampler=sampler(args.sampler))
        per_trial, reports = [], []
        for i in range(args.trials):
            t0 = time.perf_counter()
            trial = study.ask()
            space(trial)
            trial.set_user_attr("trial_id", f"t{i:04d}")
            t1 = time.perf_counter()
            for step in range(args.reports):
                trial.report(1.0 / (step + 1) + i * 1e-3, step)
            t2 = time.perf_counter()
            if i % 3:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, 0.1)
            per_trial.append(time.perf_counter() - t0)
            reports.append(t2 - t1)
        t0 = time.perf_counter()
        loaded = optuna.load_study(study_name="b", storage=storage(kind, root))
        loaded.trials_dataframe()
        load_s = time.perf_counter() - t0
        size = sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root))
    return {"per_trial_ms": 1000 * statistics.median(per_trial),
            "reports_ms": 1000 * statistics.median(reports), "load_s": load_s,
            "kib": size / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--reports", type=int, default=10)
    parser.add_argument("--sampler", choices=["random", "tpe"], default="random")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    print(f"| storage | per trial (ask, {args.reports} reports, tell), median ms | of which "
          f"reports, ms | load + trials_dataframe of {args.trials} trials, s | file KiB |")
    print("| --- | --- | --- | --- | --- |")
    for kind in ("sqlite", "journal", "journal (open lock)"):
        r = run(kind, args)
        print(f"| {kind} ({args.sampler}) | {r['per_trial_ms']:.1f} | {r['reports_ms']:.1f} | "
              f"{r['load_s']:.2f} | {r['kib']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
