"""``hpsearch run SPACE.yaml``: run a sweep on a Ray cluster or a local Ray instance."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors
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
@click.option("--overwrite", is_flag=True, help="Delete an existing sweep of the same name first.")
@click.option("--dry-run", is_flag=True, help="Validate and print the plan; start no trial.")
@click.option("-v", "--verbose", is_flag=True, help="Show Ray's own logs and trial tables.")
@handle_errors
def run(space, trials, max_concurrent, time_budget, overrides, name, storage, address,
        overwrite, dry_run, verbose):
    """Run a sweep of SPACE: Optuna TPE proposes, ASHA stops weak trials early.

    Exit codes: 0 finished, 2 invalid input, 3 no trial completed, 130 interrupted.
    """
    import sys

    from hpsearch.space import load_space

    overrides = list(overrides)
    if trials is not None:
        overrides.append(f"trials.num={trials}")
    if time_budget is not None:
        overrides.append(f"budget.time={time_budget}")
    spec = load_space(space, overrides)

    from hpsearch.driver.sweep import run_sweep

    result = run_sweep(
        spec, name=name, storage=storage, address=address, max_concurrent=max_concurrent,
        dry_run=dry_run, overwrite=overwrite, verbose=verbose,
    )
    if dry_run:
        click.echo(f"plan for sweep {result.sweep_dir.name!r} (dry run: no trial started)")
        for line in result.plan.lines(spec):
            click.echo("  " + line)
        return
    print_summary(result, spec)
    sys.exit(result.exit_code)


def print_summary(result, spec) -> None:
    from hpsearch.store.layout import SweepDir
    from hpsearch.store.summary import best_config_text, fmt_value

    counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
    click.echo("")
    click.echo(f"sweep {result.sweep_dir.name}: {result.status} ({counts})")
    if result.best:
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
