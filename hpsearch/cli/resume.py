"""``hpsearch resume NAME``: continue a sweep whose driver died or was interrupted."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.argument("name")
@click.option("--storage", help="Directory holding sweeps (default: $HPSEARCH_STORAGE, "
                                "else ./runs).")
@click.option("--address", envvar="RAY_ADDRESS", help="Ray cluster address.")
@click.option("-v", "--verbose", is_flag=True, help="Show Ray's own logs.")
@handle_errors
def resume(name, storage, address, verbose):
    """Continue sweep NAME: finished trials are kept, running ones restart from their
    latest checkpoint, and the Optuna study carries on."""
    import sys

    from hpsearch.cli.run import print_summary
    from hpsearch.driver.sweep import resume_sweep
    from hpsearch.space import load_space
    from hpsearch.store.layout import SweepDir, default_storage

    result = resume_sweep(name, storage=default_storage(storage), address=address,
                          verbose=verbose)
    print_summary(result, load_space(SweepDir.of(result.sweep_dir).space))
    sys.exit(result.exit_code)
