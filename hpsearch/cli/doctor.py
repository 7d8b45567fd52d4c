"""``hpsearch doctor``: check every node of the Ray cluster before a sweep runs on it."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.option("--address", envvar="RAY_ADDRESS",
              help="Ray cluster address (default: $RAY_ADDRESS, a cluster started on this "
                   "machine, else a local Ray instance).")
@click.option("--storage", envvar="HPSEARCH_STORAGE",
              help="The sweeps' storage directory, checked on every node (default: "
                   "$HPSEARCH_STORAGE; without it, storage is not checked).")
@click.option("--nodes", "expected_nodes", type=click.IntRange(min=1),
              help="How many nodes should be alive (a node that could not join is "
                   "otherwise invisible).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=120.0,
              show_default=True, help="Seconds a node may take to answer.")
@click.option("--json", "as_json", is_flag=True, help="Print the facts and findings as JSON.")
@handle_errors
def doctor(address, storage, expected_nodes, timeout_s, as_json):
    """Check every node: Python, Ray, torch and hpsearch versions; CUDA, GPUs and the
    driver; NCCL and its network interface; the storage (mounted, writable, the same
    files on every node, free space); clocks; token authentication.

    Exit codes: 0 no problem (warnings may be printed), 1 problems found (one line each),
    2 the cluster cannot be reached."""
    import json
    import sys

    from hpsearch.driver.cluster.doctor import run_doctor

    report = run_doctor(address=address, storage=storage, expected_nodes=expected_nodes,
                        timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, default=str))
    else:
        for line in report.lines():
            click.echo(line)
    sys.exit(0 if report.ok else 1)
