"""``hpsearch ls``: the sweeps in a storage directory, with status and best value."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.option("--storage", default="./runs", show_default=True, help="Directory holding sweeps.")
@handle_errors
def ls(storage):
    """List sweeps: name, status, trials ended/planned, best value, start time."""
    from hpsearch.store.listing import list_sweeps

    rows = list_sweeps(storage)
    if not rows:
        click.echo(f"no sweeps in {storage}")
        return
    header = ("NAME", "STATUS", "TRIALS", "BEST", "STARTED")
    table = [header] + [
        (r["name"], r["status"], r["trials"], r["best"], r["started_at"] or "") for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
