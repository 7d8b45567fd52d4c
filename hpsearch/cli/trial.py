"""``hpsearch trial SPACE.yaml``: train one configuration, no search. The quick way to
debug a config before a sweep."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.argument("space", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Fix a parameter (--set lr=0.01) or any key (--set scheduler.max_t=3).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data-parallel workers; 1 trains in this process without Ray.")
@click.option("--output", type=click.Path(file_okay=False),
              help="Write DIR/history.parquet (and trials.parquet), as sweeps do.")
@click.option("--address", envvar="RAY_ADDRESS", help="Ray cluster for --workers > 1.")
@handle_errors
def trial(space, overrides, workers, output, address):
    """Train one configuration of SPACE and print its metrics as it goes.

    Parameters not set take their midpoint (log-midpoint for log scales) or their first
    choice; the command says which it chose.
    """
    import sys

    from hpsearch.errors import TrainableError
    from hpsearch.space import load_space
    from hpsearch.trial import format_report, run_single

    spec = load_space(space, overrides)
    chosen = spec.default_config()
    config = spec.trial_config({p.name: chosen[p.name] for p in spec.params if p.name in chosen})
    config.setdefault("use_gpu", spec.resources.use_gpu)
    for p in spec.params:
        if p.name in chosen:
            how = "first choice" if p.type == "categorical" else "midpoint"
            click.echo(f"{p.name} = {chosen[p.name]!r}  ({how} of {p.describe()}; "
                       f"--set {p.name}=... to choose)")
    fixed = ", ".join(f"{k}={v!r}" for k, v in config.items() if k not in chosen)
    click.echo(f"fixed: {fixed}")
    click.echo(f"training {spec.trainable} with {workers} worker(s)...")

    try:
        from hpsearch.train.loop import HarnessConfig
        from hpsearch.trial import is_harness_workload
        from hpsearch.trainables import load_trainable

        if is_harness_workload(load_trainable(spec.trainable)):
            HarnessConfig.from_config(config)
    except ValueError as exc:
        raise TrainableError(f"invalid training config: {exc}") from None

    reports = run_single(
        spec, config, workers=workers, on_report=lambda m: click.echo(format_report(m)),
        address=address,
    )
    if output:
        _write_output(spec, chosen, reports, output)
        click.echo(f"wrote {output}/history.parquet and trials.parquet")
    last = reports[-1] if reports else {}
    status = last.get("status", "completed")
    value = last.get(spec.objective.metric)
    click.echo(f"{status}: {spec.objective.metric} = {value}")
    sys.exit(0 if status == "completed" else 3)


def _write_output(spec, chosen, reports, output) -> None:
    from pathlib import Path

    from hpsearch.tables import TrialRecords, write_tables

    Path(output).mkdir(parents=True, exist_ok=True)
    records = TrialRecords(spec)
    records.start("trial", chosen)
    t = 0.0
    for report in reports:
        report = dict(report)
        report.setdefault("time_total_s", t)
        records.result("trial", report)
    records.end("trial")
    write_tables(records, output)
