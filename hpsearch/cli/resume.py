"""``hpsearch resume NAME``: continue a sweep whose driver died or was interrupted, or
extend a finished one."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.argument("name")
@click.option("--storage", help="Directory holding sweeps (default: $HPSEARCH_STORAGE, "
                                "else ./runs).")
@click.option("--address", envvar="RAY_ADDRESS", help="Ray cluster address.")
@click.option("--trials", type=click.IntRange(min=1),
              help="Raise the number of trials to this (trials.num).")
@click.option("--time-budget", metavar="DURATION", help="A new time budget, e.g. 90m, 2h.")
@click.option("--deadline", metavar="TIME",
              help="A new deadline: 18:00 or 2026-12-01T18:00. Without it, the sweep's own "
                   "deadline applies if it is still ahead.")
@click.option("--max-concurrent", type=click.IntRange(min=1),
              help="Trials at once (default: the cap the sweep ran with, if any).")
@click.option("--report", "report", is_flag=True,
              help="Write <sweep>/report.html and report.md at the end, however it ends.")
@click.option("--notify", metavar="CMD",
              help="Run CMD once at the end, however it ends (HPSEARCH_* variables set).")
@click.option("-v", "--verbose", is_flag=True, help="Show Ray's own logs.")
@handle_errors
def resume(name, storage, address, trials, time_budget, deadline, max_concurrent, report,
           notify, verbose):
    """Continue sweep NAME: finished trials are kept, running ones restart from their
    latest checkpoint, and the Optuna study carries on. With --trials, --time-budget or
    --deadline, a finished sweep goes on further.

    Exit codes as for `hpsearch run`."""
    import sys

    from hpsearch.cli.run import print_summary, status_of
    from hpsearch.driver.sweep.run import resume_sweep
    from hpsearch.space import load_space
    from hpsearch.store import status as st
    from hpsearch.store.layout import SweepDir, default_storage

    sweep, status = None, st.SWEEP_CRASHED
    try:
        sweep = SweepDir.at(default_storage(storage), name)
        result = resume_sweep(name, storage=default_storage(storage), address=address,
                              trials=trials, time_budget=time_budget, deadline=deadline,
                              max_concurrent=max_concurrent, verbose=verbose)
        status = result.status
        print_summary(result, load_space(SweepDir.of(result.sweep_dir).space))
    except BaseException as exc:
        status = status_of(exc)
        raise
    finally:
        if report or notify:
            from hpsearch.driver.sweep.notify import finish_run

            finish_run(sweep if sweep is not None and sweep.exists() else None,
                       status=status, report=report, notify=notify)
    sys.exit(result.exit_code)
