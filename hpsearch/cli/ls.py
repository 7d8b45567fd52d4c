"""``hpsearch ls``: the sweeps in a storage directory, with status, best value and cost."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.option("--storage", help="Directory holding sweeps (default: $HPSEARCH_STORAGE, "
                                "else ./runs).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the same as a JSON list, one object per sweep.")
@click.option("--address", help="Instead: the sweeps running on this Ray cluster now, and "
                                "their shares of it (auto: the cluster on this machine).")
@handle_errors
def ls(storage, as_json, address):
    """List sweeps, newest first: status, trials ended/planned, best value and its
    configuration, worker-hours, start and end times (local time).

    With --address, list the sweeps running on that cluster: their trial slots (share),
    running trials and demand."""
    from hpsearch.store.layout import default_storage
    from hpsearch.store.listing import list_sweeps

    if address:
        _running(address, as_json)
        return
    storage = default_storage(storage)
    rows = list_sweeps(storage)
    if _echo_json_or_none(rows, as_json, f"no sweeps in {storage}"):
        return
    header = ("NAME", "STATUS", "TRIALS", "BEST", "WORKER-H", "STARTED", "ENDED", "BEST CONFIG")
    table = [header] + [_cells(r) for r in rows]
    # A damaged sweep's line is its name and the reason, which would widen every column.
    whole = [row for row in table if not row[1].startswith("damaged")]
    widths = [max(len(row[i]) for row in whole) for i in range(len(header))]
    for row in table:
        if row[1].startswith("damaged"):
            click.echo(f"{row[0].ljust(widths[0])}  {row[1]}")
        else:
            click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    for row in rows:
        if row.get("logs"):
            click.echo(f"logs of {row['name']}: {row['logs']}")


def _cells(row: dict) -> tuple[str, ...]:
    from hpsearch.store.summary import fmt_value, printable

    planned = row["trials_planned"]
    trials = f"{row['trials_ended']}/{planned if planned is not None else '?'}"
    best = "-"
    if row["best_value"] is not None:
        best = f"{row['metric']} {row['best_value']:.4g}"
    if row.get("front") is not None:  # several objectives: the front, and the first's best
        best = f"front of {row['front']}" + (f", {best}" if best != "-" else "")
    config = ", ".join(f"{k}={fmt_value(v)}" for k, v in (row["best_config"] or {}).items())
    hours = "-" if row["worker_hours"] is None else f"{row['worker_hours']:.3g}"
    return tuple(printable(v) for v in (row["name"], row["status"], trials, best, hours,
                                        _local(row["started_at"]), _local(row["ended_at"]),
                                        config or "-"))


def _local(iso: str | None) -> str:
    """An ISO time from the manifest in this machine's local time, to the minute."""
    from datetime import datetime

    if not iso:
        return "-"
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return iso


def _echo_json_or_none(rows: list[dict], as_json: bool, none: str) -> bool:
    """With ``--json``, print ``rows`` as JSON; without rows, print ``none``. Returns
    whether that was all there is to print (else the rows want a table)."""
    import json

    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return True
    if not rows:
        click.echo(none)
        return True
    return False


def _running(address: str, as_json: bool) -> None:
    from hpsearch.driver.cluster.connect import connect
    from hpsearch.driver.limits.ledger import ledger_table
    from hpsearch.store.summary import printable

    conn = connect(address)
    try:
        rows = ledger_table() or []
        total = conn.resources
    finally:
        conn.close()
    if _echo_json_or_none(rows, as_json, f"no sweeps running on {address}"):
        return
    click.echo(f"cluster: {total.get('CPU', 0):g} CPU, {total.get('GPU', 0):g} GPU")
    table = [("NAME", "SHARE", "RUNNING", "WANTS", "EACH TRIAL", "WEIGHT", "SEEN")]
    for r in rows:
        demand = ", ".join(f"{v:g} {k}" for k, v in r["demand"].items() if v)
        table.append((printable(r["name"]), str(r["share"]), str(r["running"]), str(r["want"]),
                      demand, f"{r['weight']:g}", f"{r['seen_s_ago']:g} s ago"))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
