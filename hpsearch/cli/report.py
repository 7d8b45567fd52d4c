"""``hpsearch report NAME``: write a sweep's report.html and report.md."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.argument("name")
@click.option("--storage", help="Directory holding sweeps (default: $HPSEARCH_STORAGE, "
                                "else ./runs).")
@click.option("--compare", metavar="NAME|previous",
              help="Also show what changed since another sweep: its name, or `previous` "
                   "for the newest earlier sweep of the same space name.")
@handle_errors
def report(name, storage, compare):
    """Write NAME's report: report.html (one page that opens offline, figures embedded)
    and report.md (the same facts, figures in report-images/). Works on a sweep in any
    state: running, finished, failed or interrupted."""
    from hpsearch.report import write_report
    from hpsearch.store.layout import SweepDir, default_storage

    paths = write_report(SweepDir.at(default_storage(storage), name), compare=compare)
    click.echo(f"report: {paths.html}")
    click.echo(f"        {paths.md}")
