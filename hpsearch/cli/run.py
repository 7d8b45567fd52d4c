"""``hpsearch run SPACE.yaml``: run a sweep on a Ray cluster or a local Ray instance."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors
from hpsearch.store import status as st
from hpsearch.store.summary import rerun_command


@click.command()
@click.argument("space", type=click.Path(dir_okay=False))
@click.option("--trials", type=click.IntRange(min=1), help="Number of trials (trials.num).")
@click.option("--max-concurrent", type=click.IntRange(min=1),
              help="Trials at once; default: as many as the cluster fits.")
@click.option("--time-budget", metavar="DURATION", help="Stop the sweep after e.g. 90m, 2h.")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a key of the space, e.g. --set scheduler.max_t=6. Repeatable.")
@click.option("--name", help="Sweep name (default: the space's name).")
@click.option("--storage", help="Directory holding sweeps (default: the space's storage, ./runs).")
@click.option("--address", envvar="RAY_ADDRESS",
              help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray instance).")
@click.option("--deadline", metavar="TIME",
              help="End by then: 07:00 (the next 07:00, local time) or 2026-12-01T07:00.")
@click.option("--warm-start", "warm_start", multiple=True, metavar="NAME",
              help="Learn from an earlier sweep in the same storage (repeatable); 'latest' "
                   "is the newest one of the same space.")
@click.option("--overwrite", is_flag=True, help="Delete an existing sweep of the same name first.")
@click.option("--report", "report", is_flag=True,
              help="Write <sweep>/report.html and report.md at the end, however it ends.")
@click.option("--notify", metavar="CMD",
              help="Run CMD once at the end, however it ends (HPSEARCH_* variables set).")
@click.option("--dry-run", is_flag=True, help="Validate and print the plan; start no trial.")
@click.option("--preflight", is_flag=True,
              help="Run `hpsearch doctor` on the cluster and the storage first; any problem "
                   "stops the run before its first trial (exit 2).")
@click.option("-v", "--verbose", is_flag=True, help="Show Ray's own logs and trial tables.")
@handle_errors
def run(space, trials, max_concurrent, time_budget, overrides, name, storage, address,
        deadline, warm_start, overwrite, report, notify, dry_run, preflight, verbose):
    """Run a sweep of SPACE: Optuna proposes configurations, ASHA stops weak trials early.

    --name may hold {date} and {datetime} (e.g. 'lm-{date}'), for nightly runs.

    Exit codes: 0 finished or deadline met, 2 invalid input, 3 no trial completed,
    130 interrupted, 1 other failures.
    """
    import sys

    from hpsearch.driver.sweep.run import run_sweep, sweep_dir_for

    sweep, status = None, st.SWEEP_CRASHED
    try:
        from hpsearch.space import load_space
        from hpsearch.space.overrides import option_overrides

        spec = load_space(space, [*overrides, *option_overrides(
            trials=trials, time_budget=time_budget, deadline=deadline,
            warm_start=warm_start or ())])
        sweep = sweep_dir_for(spec, name=name, storage=storage)
        if preflight and not dry_run:
            from hpsearch.driver.cluster.doctor import require_healthy_cluster

            require_healthy_cluster(address=address, storage=str(sweep.storage),
                                    stream=sys.stdout)
        result = run_sweep(
            spec, name=sweep.name, storage=str(sweep.storage), address=address,
            max_concurrent=max_concurrent, dry_run=dry_run, overwrite=overwrite,
            verbose=verbose,
        )
        status = result.status
        if dry_run:
            sweep = None  # nothing ran: no report
            click.echo(f"plan for sweep {result.sweep_dir.name!r} (dry run: no trial started)")
            for line in result.plan.lines(spec):
                click.echo("  " + line)
            return
        print_summary(result, spec)
    except BaseException as exc:
        status = status_of(exc)
        raise
    finally:
        if (report or notify) and not dry_run:
            from hpsearch.driver.sweep.notify import finish_run

            finish_run(sweep, status=status, report=report, notify=notify)
    sys.exit(result.exit_code)


def status_of(exc: BaseException) -> str:
    """The status a run that raised ends with, for the report and the notify command."""
    from hpsearch.errors import DiskFullError, HpsearchError, SweepStalledError

    if isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "Interrupted":
        return st.SWEEP_INTERRUPTED
    if isinstance(exc, SweepStalledError):
        return st.SWEEP_STALLED
    if isinstance(exc, DiskFullError):
        return st.SWEEP_DISK_FULL
    if isinstance(exc, HpsearchError):
        return st.SWEEP_FAILED
    return st.SWEEP_CRASHED


def print_front(result, spec) -> None:
    """The front's size and, for each objective, the front's trial best on it."""
    from hpsearch.store.layout import SweepDir
    from hpsearch.store.summary import best_config_text, fmt_value, front_extremes

    goals = " and ".join(f"{o.metric} ({o.mode})" for o in spec.objectives)
    if not result.front:
        click.echo(f"front of {goals}: no trial is on it yet (none completed"
                   + (" and feasible" if spec.constraints else "") + ")")
        return
    click.echo(f"front of {goals}: {len(result.front)} trial(s) (pareto in the trial table)")
    space = str(SweepDir.of(result.sweep_dir).space)
    for objective, row in front_extremes(result.front, spec):
        others = ", ".join(f"{o.metric} {fmt_value(row.get(o.metric))}"
                           for o in spec.objectives if o is not objective)
        click.echo(f"  best {objective.metric} {fmt_value(row.get(objective.metric))} "
                   f"(trial {row['trial_id']}; {others}): {best_config_text(row, spec)}")
        click.echo("    rerun it:  " + rerun_command(space, row, spec))


def print_summary(result, spec) -> None:
    from hpsearch.store.layout import SweepDir
    from hpsearch.store.summary import best_config_text, fmt_value

    counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
    click.echo("")
    click.echo(f"sweep {result.sweep_dir.name}: {result.status} ({counts})")
    if spec.several_objectives:
        print_front(result, spec)
    elif result.best:
        best = result.best
        click.echo(
            f"best {spec.objective.metric} {fmt_value(best['best_value'])} "
            f"(trial {best['trial_id']}): {best_config_text(best, spec)}"
        )
        sweep = SweepDir.of(result.sweep_dir)
        click.echo("rerun it:  " + rerun_command(str(sweep.space), best, spec))
    else:
        click.echo("no trial reported a finite objective value: see the error column of the "
                   "trial table.")
    sweep = SweepDir.of(result.sweep_dir)
    click.echo(f"tables:    {sweep.trials}, {sweep.history.name} (hpsearch.read_trials)")
    if spec.command is not None:
        click.echo(f"logs:      {sweep.trial_dirs}/<trial_id>/output.log")
