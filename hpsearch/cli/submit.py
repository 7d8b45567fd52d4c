"""``hpsearch submit SPACE [run flags]``: run a sweep as a Ray Job on the cluster."""

from __future__ import annotations

import click

from hpsearch.cli._common import handle_errors


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("space")
@click.argument("run_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--address", help="Ray Jobs API, http://HEAD:8265 (default: "
                                "$RAY_API_SERVER_ADDRESS, else $RAY_ADDRESS).")
@click.option("--submission-id", help="Default: <sweep name>-<date>, so a second "
                                      "submission on the same day is not a second run.")
@click.option("--resume", is_flag=True, help="SPACE is the name of a sweep to continue: "
                                             "submit `hpsearch resume NAME RUN_ARGS...`.")
@handle_errors
def submit(space, run_args, address, submission_id, resume):
    """Submit `hpsearch run SPACE RUN_ARGS...` as a Ray Job: the cluster's installed
    hpsearch runs it, on the head node, and it survives this machine going away.

    The current directory is uploaded (for your trainables; never .git, virtualenvs,
    runs/ or an hpsearch/ package), with its git commit for the manifest. RUN_ARGS are
    `hpsearch run` flags, e.g. --deadline 07:00 --warm-start latest --report.

    With --resume, SPACE is a sweep's name and RUN_ARGS are `hpsearch resume` flags
    (e.g. --storage): the sweep continues as a Ray Job, for example after the whole
    cluster went down.
    """
    from hpsearch.driver.cluster.submit import submission_id as default_id
    from hpsearch.driver.cluster.submit import submit_resume, submit_sweep

    args = list(run_args)
    if resume:
        result = submit_resume(space, args, address=address, sub_id=submission_id)
    else:
        from pathlib import Path

        from hpsearch.driver.sweep.run import expand_name
        from hpsearch.space import load_space

        if not Path(space).is_file():
            raise click.BadParameter(f"no such file: {space}", param_hint="SPACE")
        template = _flag(args, "--name") or load_space(space).name
        name = expand_name(template)  # a name with {date} is already one job a day
        result = submit_sweep(space, args, name=name, address=address,
                              sub_id=submission_id or (name if name != template
                                                       else default_id(name)))
    if result["existed"]:
        click.echo(f"job {result['submission_id']} was already submitted "
                   f"({result['status']}); not submitting it again")
    else:
        click.echo(f"submitted job {result['submission_id']} to {result['address']}: "
                   f"{result['entrypoint']}")
    click.echo(f"follow it:  {result['logs']}")


def _flag(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None
