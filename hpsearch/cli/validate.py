"""``hpsearch validate SPACE.yaml``: check a space file without starting Ray."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.argument("space", type=click.Path(dir_okay=True, allow_dash=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
              help="Override a key before validating, e.g. --set trials.num=4 or "
                   "--set lr=0.01 (short for params.lr). Repeatable.")
@click.option("--check-track", is_flag=True,
              help="Also reach the MLflow server of `track:`, as a run does before its "
                   "first trial.")
@handle_errors
def validate(space: str, overrides: tuple[str, ...], check_track: bool) -> None:
    """Check SPACE and print a summary; exit 2 listing every problem if it is invalid.

    Imports neither Ray nor torch, so it is instant and safe on a laptop.
    """
    from hpsearch.space import load_space, summarize

    spec = load_space(space, overrides)
    click.echo(summarize(spec))
    if check_track:
        _check_track(spec)
    click.echo(f"OK: {space} is a valid search space.")


def _check_track(spec) -> None:
    """The MLflow server reached once (TensorBoard's folder is made when the run starts)."""
    from hpsearch.space import Track
    from hpsearch.track import check_trackers, make_trackers

    trackers = make_trackers(Track(mlflow=spec.track.mlflow), sweep_name=spec.name)
    check_trackers(trackers)
    for tracker in trackers:
        click.echo(f"track: {tracker.where} answers")
    if not trackers:
        click.echo("track: no MLflow server to reach")
