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
              help="Data-parallel workers. One harness worker trains in this process without "
                   "Ray; more (or a raw Ray Train loop) run on Ray Train.")
@click.option("--output", type=click.Path(file_okay=False),
              help="Write DIR/history.parquet (and trials.parquet), as sweeps do.")
@click.option("--overwrite", is_flag=True,
              help="Let --output replace trial tables already in that directory.")
@click.option("--address", envvar="RAY_ADDRESS", help="Ray cluster for --workers > 1.")
@handle_errors
def trial(space, overrides, workers, output, overwrite, address):
    """Train one configuration of SPACE and print its metrics as it goes.

    Parameters not set take their midpoint (log-midpoint for log scales) or their first
    choice; the command says which it chose. Exit 0 when training completed, 3 when it
    diverged or the precision is unsupported.
    """
    import sys
    import time

    from hpsearch.driver.trials.single import format_report, run_single, single_config
    from hpsearch.space import load_space

    spec = load_space(space, overrides)
    config, chosen = single_config(spec)
    out = None
    if output:
        from hpsearch.store.tables import prepare_single_trial_dir

        out = prepare_single_trial_dir(output, overwrite=overwrite)
    for p in spec.params:
        if p.name in chosen:
            how = "first choice" if p.type == "categorical" else "midpoint"
            click.echo(f"{p.name} = {chosen[p.name]!r}  ({how} of {p.describe()}; "
                       f"--set {p.name}=... to choose)")
    fixed = ", ".join(f"{k}={v!r}" for k, v in config.items() if k not in chosen)
    click.echo(f"fixed: {fixed}")
    root = None
    if spec.command is not None:
        import os
        import tempfile

        from hpsearch.driver.trials.command_launch import command_argv

        root = os.fspath(out.path) if out is not None else tempfile.mkdtemp(prefix="hpsearch-trial-")
        trial_dir = os.path.join(root, "trial")
        words = command_argv(spec, config, trial_id="trial", trial_dir=trial_dir)
        click.echo(f"running {' '.join(words)}\n  in {spec.command.cwd} with {workers} "
                   f"worker(s); output: {os.path.join(trial_dir, 'output.log')}")
    else:
        click.echo(f"training {spec.trainable} with {workers} worker(s)...")

    t0 = time.monotonic()

    def on_report(metrics):
        metrics["time_total_s"] = time.monotonic() - t0
        click.echo(format_report(metrics))

    reports = run_single(spec, config, workers=workers, on_report=on_report, address=address,
                         checkpoint_root=root)
    if out is not None:
        from hpsearch.store.tables import write_single_trial

        write_single_trial(spec, chosen, reports, out)
        click.echo(f"wrote {out.history} and {out.trials.name}")
    last = reports[-1] if reports else {}
    status = last.get("status", "completed")
    values = ", ".join(f"{o.metric} = {last.get(o.metric)}" for o in spec.objectives)
    broken = [c.describe() for c in spec.constraints if c.violation(last.get(c.metric)) > 0]
    kept = "" if not spec.constraints else (
        f"; infeasible: breaks {', '.join(broken)}" if broken else "; feasible")
    click.echo(f"{status}: {values}{kept}")
    sys.exit(0 if status == "completed" else 3)
