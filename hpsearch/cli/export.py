"""``hpsearch export NAME``: write a sweep into MLflow or TensorBoard from its tables."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command()
@click.argument("name")
@click.option("--storage", help="Directory holding sweeps (default: $HPSEARCH_STORAGE, "
                                "else ./runs).")
@click.option("--mlflow", "mlflow", is_flag=False, flag_value="", default=None, metavar="[URI]",
              help="To MLflow: one run per trial under one per sweep. URI default: the "
                   "space's track.mlflow.tracking_uri, then $MLFLOW_TRACKING_URI.")
@click.option("--experiment", help="The MLflow experiment (default: the space's, else the "
                                   "sweep's name).")
@click.option("--tensorboard", metavar="DIR", type=click.Path(file_okay=False),
              help="To TensorBoard event files under DIR, a folder per trial.")
@handle_errors
def export(name, storage, mlflow, experiment, tensorboard):
    """Write sweep NAME's trials into trackers, from its tables: parameters, every report
    at its step, how each trial ended. With no tracker named, the sweep's own `track:`.

    Safe to repeat: what a tracker already holds of the sweep (an earlier export, a live
    run cut short) is continued, never written twice. Exit 2 if a tracker cannot be
    reached."""
    from hpsearch.track.export import export_sweep

    export_sweep(name, storage=storage, mlflow=True if mlflow == "" else mlflow,
                 experiment=experiment, tensorboard=tensorboard)
