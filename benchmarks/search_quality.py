"""Search quality: does hpsearch's search find a good configuration sooner than what a user
would do instead?

Three ways to answer, the first one the measure (benchmarks/README.md gives the figures):

* ``--simulate``: replay recorded learning curves through hpsearch's own searcher and
  ASHA, Ray Tune's stock stack, Optuna alone and Syne Tune's ASHA and BOHB (with
  ``pip install syne-tune``), 30 seeds or more in simulated time, no Ray
  (``benchmarks/replay``; ``--simulate --help``)::

    .venv/bin/python benchmarks/search_quality.py --simulate --seeds 30 \\
        --methods hpsearch,ray-stock,random-asha --out sq-sim.jsonl
    .venv/bin/python benchmarks/search_quality.py --table sq-sim.jsonl

* ``--confirm``: the same replay through real ``hpsearch run`` sweeps, with a command
  trainable that answers from the table in scaled real time (``--confirm --help``).
* ``--front``: how much of the Pareto front MO-ASHA finds with a second objective,
  against every trial to ``max_t`` at the same number of trials (``--front --help``).
* Without either: real ``charlm`` trials, as below (3 seeds; too few to separate methods).

Workload: the built-in ``charlm`` at 1 worker per trial, 2 trials at once (this machine's 2
cores), searched over ``lr`` (log), ``warmup_steps``, ``precision`` (fp32, bf16, fp16) and
``weight_decay``. Every method gets the same budget: the same cap on trials and the same
wall-clock time (so the same worker-seconds, ``2 x --budget``), with the same training
seed, so only the search differs. Methods:

  a  TPE + ASHA (rungs in epochs; the default until qmc, see --simulate)
  b  random + ASHA
  c  random + FIFO (every trial to max_t)
  d  Optuna alone: TPE + SuccessiveHalvingPruner on the same harness, no Ray (2 processes
     sharing one journal study, Optuna's own way to run 2 at once)
  e  the other samplers with ASHA: e-gp (GPSampler), e-qmc (Sobol start, then TPE)
  f  TPE + ASHA with ``time_attr: time`` (rungs in seconds of the trial's own time)
  (the ``a-ray`` variant of earlier figures, the study told as Ray's OptunaSearch tells
  it, patched the searcher hpsearch had before its own; benchmarks/README.md keeps them)

Trials report every ``--eval-every`` steps (8: twice an fp32 epoch), so that ASHA on time
can judge a slow trial before ``max_t``. Per run it records every report with its
wall-clock time, and computes:
  * the best val_loss reached at 25%, 50% and 100% of the worker-seconds budget;
  * wall seconds and worker-seconds the sweep used (trials' own time, Ray start excluded);
  * worker-seconds until the best val_loss first reaches ``--target``, divided by time(R),
    the time of one full training run (6 fp32 epochs, measured here first); the measure
    of the ASHA paper;
  * the share of worker-seconds spent in fp16 and bf16 trials (slow on a CPU).

Each (method, seed) appends one JSON line to ``--out``; ``--table`` prints the table from
that file. Runs take ``--budget`` seconds plus a few seconds each.

    .venv/bin/python benchmarks/search_quality.py --methods a b c d e-gp e-qmc f \\
        --seeds 0 1 2 --out sq.jsonl
    .venv/bin/python benchmarks/search_quality.py --table sq.jsonl

About 62 s a run: 22 minutes for the command above on a 2-core machine (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METHODS = ("a", "b", "c", "d", "e-gp", "e-qmc", "f")
LABELS = {
    "a": "a  TPE + ASHA (hpsearch's default until qmc)",
    "b": "b  random + ASHA",
    "c": "c  random + FIFO",
    "d": "d  Optuna alone: TPE + SuccessiveHalving",
    "e-gp": "e  GP + ASHA",
    "e-qmc": "e  QMC start, TPE + ASHA",
    "f": "f  TPE + ASHA on time (time_attr: time)",
}
MAX_T = 6  # epochs of a full trial
GRACE, RF = 1, 3  # rungs at epochs 1 and 3
STARTUP = 4  # n_startup_trials


def params(samples: int, eval_every: int) -> dict:
    return {
        "lr": {"type": "float", "low": 3.0e-4, "high": 3.0e-2, "log": True},
        "warmup_steps": {"type": "int", "low": 0, "high": 64, "step": 16},
        "precision": {"type": "categorical", "choices": ["fp32", "bf16", "fp16"]},
        "weight_decay": {"type": "float", "low": 0.0, "high": 0.1},
        "batch_size": 64,
        "samples_per_epoch": samples,
        "eval_every": eval_every,
        "checkpoint_every": 0,
    }


def space(method: str, seed: int, args, epoch_s: float) -> dict:
    algorithm = {"b": "random", "c": "random", "e-gp": "gp", "e-qmc": "qmc"}.get(method, "tpe")
    scheduler = {"type": "asha", "time_attr": "epoch", "max_t": MAX_T,
                 "grace_period": GRACE, "reduction_factor": RF}
    p = params(args.samples, args.eval_every)
    if method == "c":
        scheduler = {"type": "fifo", "time_attr": "epoch", "max_t": MAX_T}
    if method == "f":
        # The same rungs as epochs 1 and 3 of an fp32 trial, and max_t a full fp32 trial
        # plus slack, in seconds of the trial's own time.
        grace = max(1, round(GRACE * epoch_s))
        scheduler = {"type": "asha", "time_attr": "time", "grace_period": grace,
                     "max_t": max(grace + 1, math.ceil(MAX_T * epoch_s * 1.25)),
                     "reduction_factor": RF}
        p["epochs"] = MAX_T
    return {
        "name": f"sq-{method}-{seed}",
        "trainable": "charlm",
        "objective": {"metric": "val_loss", "mode": "min"},
        "params": p,
        "search": {"algorithm": algorithm, "seed": seed, "n_startup_trials": STARTUP},
        "scheduler": scheduler,
        "trials": {"num": args.trials, "max_concurrent": 2},
        "resources": {"workers": 1, "cpus_per_worker": 1},
        "budget": {"time": args.budget},
    }


def fp32_epoch_seconds(samples: int) -> float:
    """Seconds of one fp32 charlm epoch (evaluation included) in this process, 1 thread."""
    import torch

    from hpsearch.train import LocalSession, train
    from hpsearch.workloads.charlm import WORKLOAD

    torch.set_num_threads(1)
    config = {"lr": 3e-3, "batch_size": 64, "samples_per_epoch": samples, "checkpoint_every": 0}
    train({**config, "epochs": 1}, WORKLOAD, LocalSession())  # warm-up: corpus, kernels
    t = time.perf_counter()
    train({**config, "epochs": 2}, WORKLOAD, LocalSession())
    return (time.perf_counter() - t) / 2


# --- hpsearch runs ------------------------------------------------------------------------


def run_hpsearch(method: str, seed: int, args, epoch_s: float, root: str) -> dict:
    from hpsearch.driver.sweep.run import run_sweep
    from hpsearch.space import parse_space
    from hpsearch.store.tables import read_history, read_trials

    spec = parse_space(space(method, seed, args, epoch_s))
    result = run_sweep(spec, storage=root, stream=io.StringIO())
    trials = read_trials(result.sweep_dir)
    history = read_history(result.sweep_dir)
    trials = trials[trials.started_at.notna() & trials.wall_s.notna()]
    start = {r.trial_id: r.started_at.timestamp() for r in trials.itertuples()}
    spans = [(start[r.trial_id], start[r.trial_id] + r.wall_s, r.precision) for r in trials.itertuples()]
    reports = [(start[h.trial_id] + h.time_total_s, h.val_loss) for h in history.itertuples()
               if h.trial_id in start]
    full = [r.wall_s for r in trials.itertuples()
            if r.precision == "fp32" and r.epochs is not None and r.epochs >= MAX_T]
    return {"spans": spans, "reports": reports, "full_fp32_s": full,
            "statuses": trials.status.value_counts().to_dict()}


# --- Optuna alone --------------------------------------------------------------------------


def _optuna_worker(journal: str, seed: int, proc: int, args, deadline: float, log: str) -> None:
    import optuna
    import torch

    from hpsearch.train import LocalSession, train
    from hpsearch.workloads.charlm import WORKLOAD

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(journal))
    study = optuna.load_study(
        study_name="d", storage=storage,
        sampler=optuna.samplers.TPESampler(seed=seed * 100 + proc, n_startup_trials=STARTUP),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=GRACE,
                                                      reduction_factor=RF))
    out = open(log, "a")

    class OutOfTime(Exception):
        pass

    def objective(trial: optuna.Trial) -> float:
        config = {
            "lr": trial.suggest_float("lr", 3.0e-4, 3.0e-2, log=True),
            "warmup_steps": trial.suggest_int("warmup_steps", 0, 64, step=16),
            "precision": trial.suggest_categorical("precision", ["fp32", "bf16", "fp16"]),
            "weight_decay": trial.suggest_float("weight_decay", 0.0, 0.1),
            "batch_size": 64, "samples_per_epoch": args.samples, "checkpoint_every": 0,
            "eval_every": args.eval_every, "epochs": MAX_T,
        }
        started = time.time()
        trial_reported: set[int] = set()

        def on_report(m: dict) -> None:
            now = time.time()
            out.write(json.dumps({"t": now, "start": started, "trial": trial.number,
                                  "precision": config["precision"], "epoch": m["epoch"],
                                  "val_loss": m["val_loss"]}) + "\n")
            out.flush()
            value = m["val_loss"] if math.isfinite(m["val_loss"]) else math.inf
            step = int(m["epoch"])
            if step not in trial_reported:  # mid-epoch reports: the first per epoch
                trial_reported.add(step)
                trial.report(value, step)
            if now >= deadline:
                raise OutOfTime
            if trial.should_prune():
                raise optuna.TrialPruned()

        try:
            result = train(config, WORKLOAD, LocalSession(on_report=on_report))
        except OutOfTime:
            raise optuna.TrialPruned() from None
        value = result.metrics["val_loss"]
        return value if math.isfinite(value) else math.inf

    def stop_when_done(study: optuna.Study, trial) -> None:  # noqa: ANN001
        finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
        if len(finished) >= args.trials or time.time() >= deadline:
            study.stop()

    study.optimize(objective, timeout=max(1.0, deadline - time.time()),
                   callbacks=[stop_when_done], catch=(Exception,))


def run_optuna_alone(seed: int, args, root: str) -> dict:
    import optuna

    journal = os.path.join(root, f"d-{seed}.journal")
    log = os.path.join(root, f"d-{seed}.jsonl")
    optuna.create_study(study_name="d", direction="minimize", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(journal)))
    deadline = time.time() + args.budget
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_optuna_worker, args=(journal, seed, i, args, deadline, log))
             for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    rows = [json.loads(line) for line in open(log)] if os.path.exists(log) else []
    by_trial: dict[int, dict] = {}
    for r in rows:
        t = by_trial.setdefault(r["trial"], {"start": r["start"], "end": r["t"],
                                             "precision": r["precision"], "epoch": 0})
        t["end"] = max(t["end"], r["t"])
        t["epoch"] = max(t["epoch"], r["epoch"])
    spans = [(t["start"], t["end"], t["precision"]) for t in by_trial.values()]
    reports = [(r["t"], r["val_loss"]) for r in rows]
    full = [t["end"] - t["start"] for t in by_trial.values()
            if t["precision"] == "fp32" and t["epoch"] >= MAX_T]
    study = optuna.load_study(study_name="d", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(journal)))
    statuses: dict[str, int] = {}
    for t in study.trials:
        statuses[t.state.name] = statuses.get(t.state.name, 0) + 1
    return {"spans": spans, "reports": reports, "full_fp32_s": full, "statuses": statuses}


# --- measures ------------------------------------------------------------------------------


def measures(run: dict, budget_ws: float) -> dict:
    spans, reports = run["spans"], run["reports"]
    if not spans:
        return {"final_best": None}
    t0 = min(s for s, _, _ in spans)

    def worker_s_at(t: float) -> float:
        return sum(max(0.0, min(end, t) - start) for start, end, _ in spans)

    timeline = []  # (worker-seconds so far, best so far), in time order
    best = math.inf
    for t, value in sorted(reports):
        if value is not None and math.isfinite(value) and value < best:
            best = value
            timeline.append((worker_s_at(t), t - t0, best))
    total = sum(end - start for start, end, _ in spans)

    def best_at(fraction: float) -> float | None:
        found = [b for ws, _, b in timeline if ws <= fraction * budget_ws + 1e-9]
        return found[-1] if found else None

    share = {p: sum(e - s for s, e, q in spans if q == p) / total if total else 0.0
             for p in ("fp16", "bf16")}
    return {
        "final_best": timeline[-1][2] if timeline else None,
        "best_25": best_at(0.25), "best_50": best_at(0.5), "best_100": best_at(1.0),
        "wall_s": max(e for _, e, _ in spans) - t0, "worker_s": total,
        "fp16_share": share["fp16"], "bf16_share": share["bf16"], "timeline": timeline,
    }


def run_one(method: str, seed: int, args, epoch_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="hpsearch-sq-") as root:
        t = time.perf_counter()
        run = (run_optuna_alone(seed, args, root) if method == "d"
               else run_hpsearch(method, seed, args, epoch_s, root))
        elapsed = time.perf_counter() - t
    out = {"method": method, "seed": seed, "budget_s": args.budget, "trials": args.trials,
           "samples": args.samples, "eval_every": args.eval_every, "startup": STARTUP, "fp32_epoch_s": epoch_s, "elapsed_s": elapsed,
           "full_fp32_s": run["full_fp32_s"], "statuses": run["statuses"]}
    out.update(measures(run, 2 * args.budget))
    return out


# --- the table -----------------------------------------------------------------------------


def _fmt(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def table(path: str, target: float | None) -> None:
    rows = [json.loads(line) for line in open(path)]
    full = [s for r in rows for s in r["full_fp32_s"]]
    time_r = statistics.median(full) if full else MAX_T * statistics.median(
        r["fp32_epoch_s"] for r in rows)
    finals = [r["final_best"] for r in rows if r["final_best"] is not None]
    if target is None:
        target = statistics.median(finals)
    print(f"time(R) = {time_r:.1f} s: median wall time of the {len(full)} fp32 trials that ran "
          f"all {MAX_T} epochs; target val_loss = {target:.3f}; budget "
          f"{rows[0]['budget_s']} s x 2 slots, at most {rows[0]['trials']} trials")
    print()
    print("| method | seeds | final best: median [min, max] | best at 25% / 50% / 100% of "
          "worker-s (median) | wall s | worker-s | to target / time(R): median (reached) "
          "| worker-s in fp16 / bf16 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    by_method: dict[str, list] = {}
    for r in rows:
        by_method.setdefault(r["method"], []).append(r)
    for method in [m for m in METHODS if m in by_method]:
        rs = by_method[method]
        fb = [r["final_best"] for r in rs if r["final_best"] is not None]

        def med(key):
            vals = [r[key] for r in rs if r.get(key) is not None]
            return statistics.median(vals) if vals else None

        ttt = []
        for r in rs:
            hit = [ws for ws, _, b in r.get("timeline", []) if b <= target]
            ttt.append(hit[0] / time_r if hit else math.inf)
        reached = sum(math.isfinite(x) for x in ttt)
        ttt_med = statistics.median(ttt)
        print(f"| {LABELS[method]} | {len(rs)} | {_fmt(statistics.median(fb))} "
              f"[{_fmt(min(fb))}, {_fmt(max(fb))}] | {_fmt(med('best_25'))} / "
              f"{_fmt(med('best_50'))} / {_fmt(med('best_100'))} | {med('wall_s'):.0f} | "
              f"{med('worker_s'):.0f} | {'never' if math.isinf(ttt_med) else f'{ttt_med:.1f}'} "
              f"({reached}/{len(rs)}) | {med('fp16_share'):.0%} / {med('bf16_share'):.0%} |")
    if "a" in by_method:
        seeds = sorted({r["seed"] for r in by_method["a"]})
        wins = 0
        for seed in seeds:
            mine = next(r["final_best"] for r in by_method["a"] if r["seed"] == seed)
            others = [r["final_best"] for m, rs in by_method.items() if m != "a"
                      for r in rs if r["seed"] == seed and r["final_best"] is not None]
            if mine is not None and (not others or mine <= min(others) * 1.005):
                wins += 1
        print(f"\nhpsearch's default (a) is best or within 0.5% of the best other method at the "
              f"full budget on {wins}/{len(seeds)} seeds.")


def _replayed(path: str) -> bool:
    """Whether a results file holds replays (``--simulate``), not real runs."""
    with open(path) as f:
        first = f.readline()
    return bool(first.strip()) and "curve" in json.loads(first)


def main() -> None:
    if "--front" in sys.argv[1:]:
        from benchmarks.replay.front import main as front

        sys.exit(front(sys.argv[1:]))
    if "--confirm" in sys.argv[1:]:
        from benchmarks.replay.confirm import main as confirm

        sys.exit(confirm(sys.argv[1:]))
    if "--simulate" in sys.argv[1:]:
        from benchmarks.replay.cli import main as simulate

        sys.exit(simulate(sys.argv[1:]))
    if "--table" in sys.argv[1:]:
        at = sys.argv.index("--table") + 1
        if at < len(sys.argv) and _replayed(sys.argv[at]):
            from benchmarks.replay.cli import table as replayed_table

            replayed_table(sys.argv[at])
            return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["a", "b", "c", "d", "e-gp", "e-qmc", "f"],
                        choices=METHODS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=60, help="seconds per run (2 slots)")
    parser.add_argument("--trials", type=int, default=24, help="cap on trials per run")
    parser.add_argument("--samples", type=int, default=1024, help="charlm samples per epoch")
    parser.add_argument("--eval-every", type=int, default=8,
                        help="steps between reports (an epoch is samples / 64 steps)")
    parser.add_argument("--out", default="search_quality.jsonl")
    parser.add_argument("--table", metavar="JSONL", help="print the table of a results file")
    parser.add_argument("--target", type=float, default=None,
                        help="target val_loss (default: the median final best of all runs)")
    args = parser.parse_args()
    if args.table:
        table(args.table, args.target)
        return

    os.chdir(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    epoch_s = fp32_epoch_seconds(args.samples)
    print(f"fp32 charlm epoch ({args.samples} samples): {epoch_s:.2f} s", flush=True)
    from hpsearch.driver.cluster.connect import connect

    conn = connect(None)
    try:
        for seed in args.seeds:
            for method in args.methods:
                row = run_one(method, seed, args, epoch_s)
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{method:6s} seed {seed}: final best {_fmt(row['final_best'])}, "
                      f"{row['worker_s']:.0f} worker-s, fp16 {row['fp16_share']:.0%}, "
                      f"{row['statuses']} ({row['elapsed_s']:.0f} s)", flush=True)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
