"""A one-screen, human-readable summary of a validated spec (``hpsearch validate``)."""

from __future__ import annotations

from hpsearch.space._schema import show
from hpsearch.space.duration import format_duration
from hpsearch.space.spec import Spec

__all__ = ["summarize"]


def summarize(spec: Spec) -> str:
    """Describe ``spec`` in about twenty lines: parameters, rungs, trials, resources.

    Example:
        >>> from hpsearch.space import load_space
        >>> print(summarize(load_space("search_spaces/quickstart.yaml")))  # doctest: +SKIP
    """
    from hpsearch.workloads.resolve import BUILTINS

    rows: list[tuple[str, str]] = []
    if spec.command is not None:
        rows.append(("command", str(spec.command)))
        rows.append(("  in", spec.command.cwd))
        rows += _report_rows(spec)
    else:
        builtin = " (built-in)" if spec.trainable in BUILTINS else ""
        rows.append(("trainable", spec.trainable + builtin))
    goals = [f"{'minimize' if o.mode == 'min' else 'maximize'} {o.metric}"
             for o in spec.objectives]
    rows.append(("objective", goals[0] if len(goals) == 1
                 else " and ".join(goals) + " (a Pareto front)"))
    for constraint in spec.constraints:
        rows.append(("constraint", constraint.describe()))
    lines = [f"{spec.name}" + (f"  ({spec.source})" if spec.source else "")]
    lines += [f"  {key:<11} {value}" for key, value in rows]
    lines.append(f"  parameters  {len(spec.params)} searched, {len(spec.fixed)} fixed")
    width = max([len(p.name) for p in spec.params] + [len(k) for k in spec.fixed] + [4])
    for p in spec.params:
        when = ""
        if p.when is not None:
            values = " or ".join(v if isinstance(v, str) else show(v) for v in p.when.values)
            when = f"   only when {p.when.param} is {values}"
        lines.append(f"    {p.name:<{width}}  {p.describe()}{when}")
    for key, value in spec.fixed.items():
        text = value if isinstance(value, str) else show(value)
        lines.append(f"    {key:<{width}}  {text} (fixed)")
    lines += [f"  {key:<11} {value}" for key, value in _run_rows(spec)]
    return "\n".join(lines)


def _report_rows(spec: Spec) -> list[tuple[str, str]]:
    """Where a command trial's reports, and their time, come from."""
    command = spec.command
    if command.metrics_from:
        where = ", ".join(f"{f.path} ({f.format})" for f in command.metrics_from)
        rows = [("  reports", f"rows of {where}, under {{trial_dir}}, as they are written")]
    elif command.metrics:
        rows = [("  reports", " | ".join(command.metrics))]
    else:
        rows = [("  reports", "output lines of JSON objects, Python dicts (the HF Trainer's "
                 "logs) or key=value pairs; and hpsearch.report() calls")]
    key = spec.scheduler.budget_key and spec.scheduler.time_attr
    if key and not command.metrics:
        bar = (", else the HF Trainer's progress bar" if key == "step" and not
               command.metrics_from else "")
        rows.append((f"  {key}", f"the report's own `{key}`{bar}, else the last `{key}` "
                     "seen, else a count of the reports (1, 2, ...): a script that never "
                     f"gives `{key}` gets rungs at its reports, not its {spec.scheduler.unit}"))
    return rows


def _run_rows(spec: Spec) -> list[tuple[str, str]]:
    search = spec.search
    seed = "a random seed" if search.seed is None else f"seed {search.seed}"
    n = search.n_startup_trials
    algo = {
        "tpe": f"Optuna TPE, {seed}, first {n} trials random",
        "gp": f"Optuna Gaussian process, {seed}, first {n} trials random",
        "qmc": f"Optuna TPE, {seed}, first {n} trials from a Sobol sequence",
        "nsga2": f"Optuna NSGA-II, {seed}, generations of {max(2, n)} trials",
    }.get(search.algorithm, f"random sampling, {seed}")
    rows = [("search", algo), ("scheduler", _describe_scheduler(spec))]
    trials = spec.trials
    if trials.max_concurrent == "auto":
        slots = "max concurrent auto: decided by cluster size at run time"
    else:
        slots = f"at most {trials.max_concurrent} at a time"
    rows.append(("trials", f"{trials.num}, {slots}; up to {trials.max_failures} retries on "
                           "failure"))
    res = spec.resources
    per_trial = ", ".join(f"{n:g} {k}" for k, n in res.per_trial().items())
    gpus = f" + {res.gpus_per_worker:g} GPU" if res.use_gpu else ""
    rows.append(("resources", f"{res.workers} worker{'s' if res.workers != 1 else ''} x "
                              f"({res.cpus_per_worker:g} CPU{gpus}) per trial = {per_trial}"))
    if spec.budget.time_s is not None:
        rows.append(("budget", f"{format_duration(spec.budget.time_s)} of wall time "
                               f"({spec.budget.time_s:g} s)"))
    rows.append(("storage", spec.storage))
    ck = spec.checkpoints
    rows.append(("checkpoints", f"newest {ck.keep} per trial; an ended trial keeps them "
                                f"only while among the {ck.keep_best_trials} best"))
    if spec.track.any:
        mlflow = spec.track.mlflow
        where = [] if mlflow is None else [
            f"MLflow at {mlflow.tracking_uri or '$MLFLOW_TRACKING_URI'}, experiment "
            f"{mlflow.experiment or spec.name}"]
        rows.append(("track", "; ".join(where + ["TensorBoard"] * spec.track.tensorboard)))
    return rows


def _describe_scheduler(spec: Spec) -> str:
    s = spec.scheduler
    unit = s.unit
    if s.type == "fifo" and s.time_attr == "time":
        return "FIFO: every trial runs the length its params give"
    if s.type == "fifo":
        return f"FIFO: every trial runs {s.max_t} {unit}"
    rungs = s.rungs()
    stops = (f"rungs at {unit} " + ", ".join(str(r) for r in rungs)) if rungs else (
        "no rung before max_t, so ASHA stops no trial early")
    brackets = (f"; {s.brackets} brackets, bracket k from rung k on"
                if s.brackets > 1 else "")
    if s.progressive:
        brackets = (f"; trials end at {rungs[1]} {unit} at first, a rung later each time "
                    "the top two rungs rank trials differently" if len(rungs) > 1 else
                    "; with one rung below max_t it ends trials where ASHA would")
    return (f"{'PASHA' if s.progressive else 'ASHA'}: up to {s.max_t} {unit}, keeps the top 1/{s.reduction_factor} at each "
            f"rung; {stops}{brackets}")
