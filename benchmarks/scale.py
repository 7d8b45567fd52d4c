"""Scale: what a sweep of thousands of short trials costs in bookkeeping.

Three questions, each answered side by side in one run:

* ``sweep``: N trivial trials through hpsearch (``run_sweep``) versus the same trials
  through bare Ray Tune with the same searcher (Optuna TPE through Tune's
  ``OptunaSearch``, same seed) and scheduler (ASHA, same rungs), 2 at a time, one CPU
  each. **Goal: hpsearch wall <= 1.10x bare Tune's.** The trial is the same code on both
  sides: the harness training a 2x2 linear layer on 8 samples for ``max_t`` one-step
  epochs, no checkpoints (a raw function trainable would run as a Ray Train run under
  hpsearch, seconds per trial, which would measure Ray Train, not bookkeeping). Wall is
  ``Tuner.fit()`` and, for hpsearch, everything after it (last table write, the study
  settled, the manifest): Ray's start and stop are left out of both. Each side runs in
  its own driver process, which reports its peak RSS (``ru_maxrss``) and the CPU seconds
  that it and the processes below it still alive at the end (Ray's daemons, the ledger)
  used over the same span. Trial actors that Tune stopped before the end are not counted
  (their time goes to no living process), so this is mostly the driver's CPU: on a shared
  machine the wall varies with other people's load, and the CPU says what each driver
  itself asked of the machine. Sides alternate with ``--reps``, after ``--warmup``
  untimed trials per side.
* ``track``: the same N trivial trials through hpsearch without trackers and with both
  (``track: {mlflow: ..., tensorboard: true}``, side ``hpsearch-tracked``), sides
  alternating as for ``sweep``. One real MLflow server (``tests/track/mlflow_server.py``:
  SQLite, one worker, on this machine) serves the whole run, a fresh experiment per tracked
  side (``rep1``, ``rep2``...). The wall is ``SweepRun.fit`` as for ``sweep``, which
  includes the record's close, where the trackers get up to 15 s to drain their queues; the
  drain is also timed apart, and the table says whether it hit that bound (the run's line
  "did not take every update"), how many history rows MLflow had been sent by then, and
  the trial runs and ``val_loss`` points read back from the server afterwards (the tracker's
  thread goes on sending until the driver exits, so those run high). Driver CPU is the
  driver process's own, every thread (``time.process_time``); the server's CPU is given
  apart. Measured (2 reps, load 2-4, the server on the same 2 cores): **tracked/untracked
  wall 2.89x at 500 trials, 1.98x at 2,000; driver CPU 2.06x, 1.72x**; the drain hit its
  15 s bound in every rep, with ~80% (500) and 49% (2,000) of the history rows in MLflow
  by then; TensorBoard alone (side ``hpsearch-tensorboard``, run by hand) 1.13x wall
  (``benchmarks/README.md``, "track").
* ``read``: a 10,000-trial x 30-report history, made through ``TrialRecords`` and the real
  history writer (one append per trial end, as a sweep writes it), read back with
  ``hpsearch.read_history`` and ``pd.read_parquet(dir)``. **Goal: < 1 s.** Peak RSS of
  the reading process, in a subprocess of its own.
* ``writes``: the cost of one write at a trial end as the sweep grows, layout 3 (the trial
  table replaced whole, the history appended to) against the single-file layout it
  replaced (every write rewrote both tables), on the same records.

    .venv/bin/python benchmarks/scale.py sweep --trials 2000 --reps 1   # starts Ray
    .venv/bin/python benchmarks/scale.py track --trials 500 --reps 2    # Ray and MLflow
    .venv/bin/python benchmarks/scale.py read
    .venv/bin/python benchmarks/scale.py writes

``sweep --same-files`` has bare Tune write only what hpsearch writes of Tune's files (CSV
and JSON, no TensorBoard events: ``HPSEARCH_TENSORBOARD``), so that the ratio is the cost
of hpsearch's own bookkeeping. ``sweep --profile FILE`` runs each side's driver under cProfile (``FILE.bare``,
``FILE.hpsearch``) and prints where their time goes.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAX_T, GRACE, RF = 4, 1, 2
SEED = 0


# --- the trivial trial (benchmarks/_trivial.py) on both sides ----------------------------


FIXED = {"batch_size": 8, "checkpoint_every": 0}
SPACE = {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}}


def spec_for(trials: int, track: dict | None = None):
    """The benchmark's space; ``track`` is its ``track:`` section (none: no tracker)."""
    from hpsearch.space import parse_space

    return parse_space({
        "name": "scale",
        "trainable": "benchmarks._trivial:WORKLOAD",
        "objective": {"metric": "val_loss", "mode": "min"},
        "params": {**SPACE, **FIXED},
        "search": {"algorithm": "tpe", "seed": SEED, "n_startup_trials": 10},
        "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": MAX_T,
                      "grace_period": GRACE, "reduction_factor": RF},
        "trials": {"num": trials, "max_concurrent": 2},
        "resources": {"workers": 1, "cpus_per_worker": 1},
        **({"track": track} if track else {}),
    })


class _BareSession:
    """The harness session of a bare Tune function trial: reports go to Tune."""

    world_rank = local_rank = 0
    world_size = 1
    device_index = None

    def report(self, metrics, checkpoint_dir=None):
        from ray import tune

        tune.report(metrics)

    def latest_checkpoint_dir(self):
        return None


def bare_trial(config: dict) -> None:
    """The bare Tune side's trainable: the same harness run as hpsearch's trials."""
    import torch

    from benchmarks._trivial import WORKLOAD
    from hpsearch.train.loop import train

    torch.set_num_threads(1)  # as hpsearch's in-process runner does for 1 CPU
    train({**FIXED, **config, "epochs": MAX_T}, WORKLOAD, _BareSession())


# --- one side of the sweep, in its own driver process --------------------------------------


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and the processes below it that are alive
    now (Ray's daemons and workers, which a local ``ray.init`` starts as its descendants),
    with the children each of them reaped: less noisy than wall time on a shared machine.
    A process that exited unreaped (a trial actor Tune stopped) is not counted."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, times = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the name: state ppid ... utime(14) stime(15) cutime(16) cstime(17)
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(v) for v in fields[11:15]) / tick
    mine, total = {os.getpid()}, 0.0
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                changed = True
    return sum(times.get(pid, 0.0) for pid in mine)


def _side_hpsearch(trials: int, root: str, profile: str | None,
                   track: dict | None = None) -> dict:
    from hpsearch.driver.sweep.fit import SweepRun
    from hpsearch.driver.sweep.run import run_sweep
    from hpsearch.store.tables import read_history, read_trials

    timed = {}
    real_fit = SweepRun.fit

    def fit(self):
        t, cpu, own = time.perf_counter(), tree_cpu_s(), time.process_time()
        try:
            return real_fit(self)
        finally:
            timed["wall"] = time.perf_counter() - t
            timed["cpu"] = tree_cpu_s() - cpu  # before run_sweep stops Ray
            timed["driver_cpu"] = time.process_time() - own  # every thread of the driver

    SweepRun.fit = fit
    if track:  # the trackers' close (their drain) is inside fit: timed apart as well
        from hpsearch.track import Tracking

        real_closed = Tracking.closed

        def closed(self, status, record):
            t = time.perf_counter()
            try:
                return real_closed(self, status, record)
            finally:
                timed["drain"] = time.perf_counter() - t
                timed["unsent"] = {p.tracker.where: p.put_count - p.done_count
                                   for p in self.pumps}
                # MLflow's rows sent by the end of the drain (its thread, a daemon, goes
                # on sending until the process exits, so what is read back later is more).
                timed["rows_sent"] = sum(getattr(p.tracker, "rows_sent", 0)
                                         for p in self.pumps if "MLflow" in p.tracker.where)

        Tracking.closed = closed
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    stream = io.StringIO()
    result = run_sweep(spec_for(trials, track), storage=root, stream=stream)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    table = read_trials(result.sweep_dir)
    history = read_history(result.sweep_dir)
    out = {"wall": timed["wall"], "cpu": timed["cpu"], "driver_cpu": timed["driver_cpu"],
           "trials": len(table),
           "reports": len(history), "status": dict(table.status.value_counts())}
    if track:
        log = stream.getvalue()
        out["drain_s"] = timed.get("drain")
        out["unsent_events"] = timed.get("unsent")
        out["mlflow_rows_sent_by_close"] = timed.get("rows_sent")
        out["drain_bound_hit"] = "did not take every update" in log
        out["tracker_lines"] = [ln.strip() for ln in log.splitlines()
                                if "MLflow" in ln or "TensorBoard" in ln
                                or "did not take" in ln][:6]
        if track.get("mlflow"):
            out.update(_mlflow_counts(track["mlflow"]["tracking_uri"],
                                      track["mlflow"]["experiment"], history))
        tb = Path(result.sweep_dir) / "tensorboard"
        out["tensorboard_trial_dirs"] = (sum(1 for d in tb.iterdir() if d.is_dir())
                                         if tb.is_dir() else 0)
    return out


def _mlflow_counts(uri: str, experiment: str, history) -> dict:
    """What reached MLflow, read back with its client after the run: trial runs, the
    the objective's points, against the history's rows."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    runs, token = [], None
    while found is not None:
        page = client.search_runs([found.experiment_id], max_results=1000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            break
    trial_runs = [r for r in runs if "hpsearch.trial_id" in r.data.tags]
    points = sum(len(client.get_metric_history(r.info.run_id, "val_loss"))
                 for r in trial_runs)
    return {"mlflow_trial_runs": len(trial_runs),
            "mlflow_sweep_runs": sum(r.data.tags.get("hpsearch.kind") == "sweep" for r in runs),
            "mlflow_runs_ended": sum(r.info.status != "RUNNING" for r in trial_runs),
            "mlflow_val_loss_points": points,
            "history_val_loss_rows": int(history["val_loss"].notna().sum())}


def _side_bare(trials: int, root: str, *, same_files: bool = False) -> dict:
    import optuna
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    loggers = None
    if same_files:  # Tune's CSV and JSON files, no TensorBoard files: what hpsearch writes
        from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

        os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
        loggers = [CSVLoggerCallback(), JsonLoggerCallback()]
    # Ray started as hpsearch starts it on a machine without a cluster (and as `ray.init()`
    # does with ray[default]): the dashboard runs too, so the ratio is hpsearch's own cost.
    ray.init(address="local", num_cpus=2, logging_level="ERROR", log_to_driver=False)
    try:
        searcher = OptunaSearch(
            space={"lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)},
            metric="val_loss", mode="min",
            sampler=optuna.samplers.TPESampler(seed=SEED, n_startup_trials=10))
        tuner = tune.Tuner(
            tune.with_resources(bare_trial, {"cpu": 1}),
            tune_config=tune.TuneConfig(
                search_alg=searcher,
                scheduler=ASHAScheduler(time_attr="epoch", metric="val_loss", mode="min",
                                        max_t=MAX_T, grace_period=GRACE, reduction_factor=RF),
                num_samples=trials, max_concurrent_trials=2, reuse_actors=True),
            run_config=tune.RunConfig(storage_path=root, name="bare", verbose=0,
                                      callbacks=loggers),
        )
        t, cpu = time.perf_counter(), tree_cpu_s()
        grid = tuner.fit()
        wall = time.perf_counter() - t
        cpu = tree_cpu_s() - cpu
        df = grid.get_dataframe()
        return {"wall": wall, "cpu": cpu, "trials": len(df),
                "reports": int(df["training_iteration"].sum())}
    finally:
        ray.shutdown()


def side_main(args) -> None:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with tempfile.TemporaryDirectory(prefix="hpsearch-scale-") as root:
        if args.side == "hpsearch":
            out = _side_hpsearch(args.trials, root, args.profile)
        elif args.side == "hpsearch-tracked":
            track = {"mlflow": {"tracking_uri": args.mlflow_uri,
                                "experiment": args.experiment}, "tensorboard": True}
            out = _side_hpsearch(args.trials, root, args.profile, track)
        elif args.side == "hpsearch-tensorboard":  # run alone, to split the trackers' cost
            out = _side_hpsearch(args.trials, root, args.profile, {"tensorboard": True})
        elif args.profile:
            import cProfile

            profiler = cProfile.Profile()
            out = profiler.runcall(_side_bare, args.trials, root, same_files=args.same_files)
            profiler.dump_stats(args.profile)
        else:
            out = _side_bare(args.trials, root, same_files=args.same_files)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out, default=str), flush=True)


def run_side(side: str, trials: int, profile: str | None = None, *,
             same_files: bool = False, mlflow_uri: str | None = None,
             experiment: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "_side", side, "--trials", str(trials)]
    if profile:
        cmd += ["--profile", profile]
    if same_files:
        cmd += ["--same-files"]
    if mlflow_uri:
        cmd += ["--mlflow-uri", mlflow_uri, "--experiment", experiment]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"{side} side failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                     f"{proc.stderr[-6000:]}")


def _settle(timeout_s: float = 30.0, quiet_s: float = 3.0) -> None:
    """Wait for the previous side's Ray daemons to exit, then a little longer, so that a
    side does not start while the last one is still shutting down around it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["pgrep", "-f", "raylet|gcs_server|ray::"], capture_output=True,
                             text=True).stdout
        if not out.strip():
            break
        time.sleep(0.5)
    time.sleep(quiet_s)


def sweep_main(args) -> None:
    if args.warmup:
        # Untimed, both sides, so that no measured side is the first to start Ray and
        # load torch into fresh actors after an idle spell: without it, the side that ran
        # first was the slower in every earlier run (the ratio depended on the order).
        for side in ("bare", "hpsearch"):
            run_side(side, args.warmup, same_files=args.same_files)
        print(f"  warm-up: {args.warmup} trials per side, untimed", flush=True)
    rows = []
    for rep in range(args.reps):
        order = ["bare", "hpsearch"] if rep % 2 == 0 else ["hpsearch", "bare"]
        got = {}
        for side in order:
            _settle()
            t = time.perf_counter()
            profile = f"{args.profile}.{side}" if args.profile else None
            got[side] = run_side(side, args.trials, profile, same_files=args.same_files)
            got[side]["process_s"] = time.perf_counter() - t
            print(f"  rep {rep + 1} {side}: {json.dumps(got[side], default=str)}", flush=True)
        rows.append(got)
    print("\n| N trials | side | wall s | ms/trial | CPU s (driver, daemons) | trials | reports "
          "| peak driver RSS MB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for got in rows:
        for side in ("bare", "hpsearch"):
            g = got[side]
            print(f"| {args.trials} | {side} | {g['wall']:.1f} | {1e3 * g['wall'] / args.trials:.0f} "
                  f"| {g['cpu']:.1f} | {g['trials']} | {g['reports']} | {g['peak_rss_mb']:.0f} |")
    for what in ("wall", "cpu"):
        ratios = [g["hpsearch"][what] / g["bare"][what] for g in rows]
        # The side that runs first in a pair has been the slower one in most runs, so the
        # sides alternate and the summary is the geometric mean over the pairs, in which
        # that effect cancels when --reps is even.
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\nhpsearch / bare Tune {what}: {', '.join(f'{r:.3f}' for r in ratios)} "
              f"(geometric mean {geo:.3f})" + ("; goal <= 1.10" if what == "wall" else ""))
    if args.profile:
        import pstats

        for side in ("bare", "hpsearch"):
            print(f"\nprofile of the {side} driver ({args.profile}.{side}), cumulative:")
            pstats.Stats(f"{args.profile}.{side}").sort_stats("cumulative").print_stats(
                "hpsearch/|tune/search|optuna/(samplers|storages)|tune/logger|"
                "tune_controller.py.*(step|checkpoint)", 40)


# --- tracking: hpsearch without and with both trackers ---------------------------------------

TRACK_SIDES = ("hpsearch", "hpsearch-tracked")


def _mlflow_server(root: Path):
    """The tests' real MLflow server (``tests/track/mlflow_server.py``), loaded by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_mlflow_server", ROOT / "tests" / "track" / "mlflow_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MlflowServer(root)


def _processes_cpu_s(pids) -> float:
    """CPU seconds used so far by ``pids`` (and the children each of them reaped)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15]) / tick
    return total


def track_main(args) -> None:
    """Both sides as ``sweep`` runs them, against one real MLflow server for the whole run;
    each tracked side writes to an experiment of its own."""
    with tempfile.TemporaryDirectory(prefix="hpsearch-scale-mlflow-") as store:
        server = _mlflow_server(Path(store))
        server.start()
        try:
            _track_sides(args, server)
        finally:
            server.stop()


def _track_sides(args, server) -> None:
    def side_run(side: str, trials: int, experiment: str, profile: str | None = None):
        tracked = side == "hpsearch-tracked"
        before = _processes_cpu_s(server.processes())
        got = run_side(side, trials, profile, mlflow_uri=server.uri if tracked else None,
                       experiment=experiment if tracked else None)
        # The whole side, the counts read back included: what the server was asked.
        got["server_cpu"] = _processes_cpu_s(server.processes()) - before
        return got

    print(f"  MLflow server at {server.uri}", flush=True)
    if args.warmup:
        for side in TRACK_SIDES:
            side_run(side, args.warmup, "warmup")
        print(f"  warm-up: {args.warmup} trials per side, untimed", flush=True)
    rows = []
    for rep in range(args.reps):
        order = list(TRACK_SIDES) if rep % 2 == 0 else list(reversed(TRACK_SIDES))
        got = {}
        for side in order:
            _settle()
            t = time.perf_counter()
            profile = f"{args.profile}.{side}" if args.profile else None
            got[side] = side_run(side, args.trials, f"rep{rep + 1}", profile)
            got[side]["process_s"] = time.perf_counter() - t
            print(f"  rep {rep + 1} {side}: {json.dumps(got[side], default=str)}", flush=True)
        rows.append(got)
    print("\n| N trials | side | wall s | ms/trial | driver CPU s | tree CPU s | MLflow "
          "server CPU s | of the wall: trackers' "
          "drain s | drain bound (15 s) hit | history rows | MLflow rows sent by the close | "
          "MLflow trial runs, read back | MLflow val_loss points, read back | TensorBoard "
          "trial dirs |")
    print("| --- " * 14 + "|")
    for got in rows:
        for side in TRACK_SIDES:
            g = got[side]
            tracked = side == "hpsearch-tracked"
            extra = (f"{g['drain_s']:.1f} | {'yes' if g['drain_bound_hit'] else 'no'} "
                     f"| {g['reports']} | {g['mlflow_rows_sent_by_close']} "
                     f"| {g['mlflow_trial_runs']} | {g['mlflow_val_loss_points']} "
                     f"| {g['tensorboard_trial_dirs']}") if tracked else \
                f"| | {g['reports']} | | | |"
            print(f"| {args.trials} | {side} | {g['wall']:.1f} "
                  f"| {1e3 * g['wall'] / args.trials:.0f} | {g['driver_cpu']:.1f} "
                  f"| {g['cpu']:.1f} | {g['server_cpu']:.1f} | {extra} |")
    for what in ("wall", "driver_cpu", "cpu"):
        ratios = [g["hpsearch-tracked"][what] / g["hpsearch"][what] for g in rows]
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ntracked / untracked {what}: {', '.join(f'{r:.3f}' for r in ratios)} "
              f"(geometric mean {geo:.3f})")
    if args.profile:
        import pstats

        for side in TRACK_SIDES:
            print(f"\nprofile of the {side} driver ({args.profile}.{side}), cumulative:")
            pstats.Stats(f"{args.profile}.{side}").sort_stats("cumulative").print_stats(
                "hpsearch/|mlflow/|tensorboard|tune_controller.py.*step", 40)


# --- the history of a large sweep ------------------------------------------------------------


def synthetic_records(n_trials: int, reports: int, *, on_end=None):
    """Records of a finished ``n_trials`` x ``reports`` sweep, fed as Tune would feed them;
    ``on_end(records)`` after each trial ends (a sweep's write)."""
    import random

    from hpsearch.space.spec import Objective, Spec, FloatParam, CategoricalParam, Scheduler
    from hpsearch.store.records import TrialRecords

    spec = Spec(name="scale", trainable="digits", objective=Objective("val_loss", "min"),
                params=(FloatParam("lr", 1e-4, 1e-1, log=True),
                        CategoricalParam("precision", ("fp32", "bf16"))),
                fixed={}, scheduler=Scheduler(type="asha", max_t=reports, grace_period=1,
                                              reduction_factor=3))
    rng = random.Random(0)
    records = TrialRecords(spec)
    for i in range(n_trials):
        tid = f"{i:08x}"
        records.start(tid, {"lr": 10 ** rng.uniform(-4, -1), "precision": "bf16"})
        for e in range(1, reports + 1):
            records.result(tid, {
                "step": 50 * e, "epoch": float(e), "time_total_s": 1.5 * e,
                "training_iteration": e, "val_loss": rng.random(), "train_loss": rng.random(),
                "lr": 1e-3, "grad_norm": rng.random(), "samples_per_s": 1e4 * rng.random(),
                "precision": "bf16", "skipped_steps": 0, "status": "running",
            })
        records.end(tid)
        if on_end is not None:
            on_end(records)
    return records


def read_child(args) -> None:
    """Time reading the sweep at ``args.path`` (in a fresh process: its peak RSS)."""
    import pandas as pd

    import hpsearch

    t = time.perf_counter()
    h = hpsearch.read_history(args.path)
    read_s = time.perf_counter() - t
    rss_after_ours = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    p = pd.read_parquet(Path(args.path) / "history.parquet")
    pandas_s = time.perf_counter() - t
    assert len(p) == len(h), (len(p), len(h))
    print("RESULT " + json.dumps({"rows": len(h), "columns": len(h.columns), "read_history_s": read_s,
                                  "pd_read_parquet_s": pandas_s, "peak_rss_mb": rss_after_ours}))


def read_main(args) -> None:
    from hpsearch.store.layout import SweepDir
    from hpsearch.store.tables import TablesWriter
    from hpsearch.store.tables.frames import history_rows_frame

    with tempfile.TemporaryDirectory(prefix="hpsearch-scale-read-") as root:
        sweep = SweepDir.of(root)
        writer = TablesWriter(sweep)  # one per sweep, as a sweep's record keeps it
        t = time.perf_counter()
        writes = [0.0, 0]

        def on_end(records):
            # The history written as a sweep writes it (one append per trial end), so its
            # parts are a sweep's; trials.parquet once at the end (it does not grow with
            # reports, and "writes" measures it).
            w = time.perf_counter()
            writer.history.write(records, history_rows_frame)
            writes[0] += time.perf_counter() - w
            writes[1] += 1

        records = synthetic_records(args.n_trials, args.reports, on_end=on_end)
        writer.write(records)
        made = time.perf_counter() - t
        parts = len(SweepDir.history_parts(sweep.history))
        size = sum(p.stat().st_size for p in sweep.history.iterdir()) / 2 ** 20
        print(f"made {args.n_trials} x {args.reports} = {len(records.history)} reports in "
              f"{made:.1f} s; {writes[1]} history writes took {writes[0]:.1f} s "
              f"({1e3 * writes[0] / writes[1]:.2f} ms each); history: {parts} parts, "
              f"{size:.1f} MB; whole writes {writer.history.full_writes}, rows converted "
              f"{writer.history.rows_converted}")
        results = []
        for _ in range(args.reps):
            proc = subprocess.run([sys.executable, __file__, "_read", root], capture_output=True,
                                  text=True, cwd=ROOT)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(proc.stdout + proc.stderr)
            results.append(json.loads(line[7:]))
        results.sort(key=lambda r: r["read_history_s"])
        mid = results[len(results) // 2]
        print(f"\n| history | rows | columns | hpsearch.read_history s | pd.read_parquet(dir) s "
              f"| peak reader RSS MB |")
        print("| --- | --- | --- | --- | --- | --- |")
        print(f"| {args.n_trials} trials x {args.reports} reports, {parts} parts | {mid['rows']} "
              f"| {mid['columns']} | {mid['read_history_s']:.3f} "
              f"(range {results[0]['read_history_s']:.3f}..{results[-1]['read_history_s']:.3f}) "
              f"| {mid['pd_read_parquet_s']:.3f} | {mid['peak_rss_mb']:.0f} |")


# --- one write, as the sweep grows ----------------------------------------------------------


def _single_file_write(records, sweep) -> None:
    """What every write did before layout 3: both tables rewritten whole."""
    from hpsearch.store.layout import write_atomic
    from hpsearch.store.tables import history_frame, trials_frame

    trials, history = trials_frame(records), history_frame(records)
    write_atomic(sweep.trials, lambda tmp: trials.to_parquet(tmp, index=False))
    target = sweep.path / "history-single-file.parquet"
    write_atomic(target, lambda tmp: history.to_parquet(tmp, index=False))


def writes_main(args) -> None:
    from hpsearch.store.layout import SweepDir
    from hpsearch.store.tables import TablesWriter, trials_frame, write_parquet_atomic
    from hpsearch.store.tables.frames import history_rows_frame

    sizes = sorted(set(args.at))
    print("| trials so far | reports so far | single file: ms per write | layout 3: ms per "
          "write | of which trials.parquet | of which the history's append | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        old, new = SweepDir.of(a), SweepDir.of(b)
        writer = TablesWriter(new)
        state = {"next": 0}

        def append(records):
            writer.history.write(records, history_rows_frame)

        def on_end(records):
            n = len(records.trials)
            if state["next"] < len(sizes) and n == sizes[state["next"]]:
                state["next"] += 1
                times = {"old": [], "trials": [], "history": []}
                for _ in range(args.reps):  # one more trial end each time, both layouts
                    tid = f"x{n}_{len(times['old'])}"
                    records.start(tid, {"lr": 0.01, "precision": "bf16"})
                    for e in range(1, args.reports + 1):
                        records.result(tid, {"step": e, "epoch": float(e), "val_loss": 0.5,
                                             "time_total_s": float(e), "training_iteration": e})
                    records.end(tid)
                    # A write of the record's is these two steps: timed apart.
                    for key, fn in (("old", lambda r: _single_file_write(r, old)),
                                    ("trials", lambda r: write_parquet_atomic(
                                        trials_frame(r), new.trials)),
                                    ("history", append)):
                        t = time.perf_counter()
                        fn(records)
                        times[key].append(time.perf_counter() - t)
                o, tr, h = (sorted(times[k])[len(times[k]) // 2] * 1e3
                            for k in ("old", "trials", "history"))
                print(f"| {n} | {len(records.history)} | {o:.1f} | {tr + h:.1f} | {tr:.1f} | "
                      f"{h:.2f} | {o / (tr + h):.0f}x |", flush=True)
            else:  # between the sizes measured: the history's appends only (the trial
                # table is written whole at every write, it keeps no state)
                append(records)

        synthetic_records(max(sizes) + 1, args.reports, on_end=on_end)


# --- the trial table's two paths, side by side ----------------------------------------------


def _trial_reports(rng, tid: str, k: int, lr: float, t0: float):
    """The harness's reports of one trivial trial that ran ``k`` one-step epochs."""
    for e in range(1, k + 1):
        yield {"trial_id": tid, "step": e, "epoch": float(e), "lr": lr,
               "train_loss": rng.random(), "val_loss": rng.random(), "grad_norm": rng.random(),
               "samples_per_s": 1e3 * rng.random(), "peak_mem_mb": None, "gpu_util_pct": None,
               "precision": "fp32", "fp32_matmul": "ieee", "skipped_steps": 0,
               "status": "completed" if e == MAX_T else "running", "first_step_at": t0 + 0.01,
               "time_total_s": 0.02 * e, "training_iteration": e}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("sweep", help="hpsearch vs bare Tune, N trivial trials")
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--profile", help="cProfile the hpsearch driver into this file")
    p.add_argument("--warmup", type=int, default=50,
                   help="trials per side run untimed first (0: none)")
    p.add_argument("--same-files", action="store_true",
                   help="bare Tune writes what hpsearch writes: its CSV and JSON files, no "
                        "TensorBoard files (default: Tune's defaults, as a user gets them)")
    p = sub.add_parser("track", help="hpsearch without vs with both trackers, N trivial "
                                     "trials (starts Ray and an MLflow server)")
    p.add_argument("--trials", type=int, default=500)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--profile", help="cProfile each side's driver into FILE.<side>")
    p.add_argument("--warmup", type=int, default=30,
                   help="trials per side run untimed first (0: none)")
    p = sub.add_parser("read", help="read a 10,000 x 30 history")
    p.add_argument("--n-trials", type=int, default=10_000)
    p.add_argument("--reports", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    p = sub.add_parser("writes", help="one write's cost as the sweep grows")
    p.add_argument("--at", type=int, nargs="+", default=[100, 1000, 2000, 5000, 10000])
    p.add_argument("--reports", type=int, default=10)
    p.add_argument("--reps", type=int, default=5)
    p = sub.add_parser("_side")
    p.add_argument("side", choices=["hpsearch", "bare", "hpsearch-tracked",
                                            "hpsearch-tensorboard"])
    p.add_argument("--trials", type=int, required=True)
    p.add_argument("--profile")
    p.add_argument("--same-files", action="store_true")
    p.add_argument("--mlflow-uri")
    p.add_argument("--experiment")
    p = sub.add_parser("_read")
    p.add_argument("path")
    args = parser.parse_args()
    {"sweep": sweep_main, "track": track_main, "read": read_main, "writes": writes_main,
     "_side": side_main,
     "_read": read_child}[args.what](args)


if __name__ == "__main__":
    main()
