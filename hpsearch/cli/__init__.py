"""The ``hpsearch`` command line: a tiny root group that loads each command on demand.

Each command lives in its own module, ``hpsearch/cli/<command>.py``, which exposes one
click command. Register it by adding a line to :data:`COMMANDS`. Modules are imported only
when their command runs (or ``--help`` lists them), so ``hpsearch validate`` never pays for
``run``'s imports. A registered module that does not exist yet is simply not listed.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from hpsearch import __version__

__all__ = ["COMMANDS", "main"]

#: Command name -> ``module:attribute`` of its click command.
COMMANDS = {
    "validate": "hpsearch.cli.validate:validate",
    "run": "hpsearch.cli.run:run",
    "resume": "hpsearch.cli.resume:resume",
    "trial": "hpsearch.cli.trial:trial",
    "ls": "hpsearch.cli.ls:ls",
    "report": "hpsearch.cli.report:report",
    "doctor": "hpsearch.cli.doctor:doctor",
    "submit": "hpsearch.cli.submit:submit",
    "export": "hpsearch.cli.export:export",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported from ``module:attribute`` on first use."""

    def __init__(self, *args, lazy_commands: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        available = [name for name, ref in self.lazy_commands.items() if _module_exists(ref)]
        return sorted({*super().list_commands(ctx), *available})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        ref = self.lazy_commands.get(cmd_name)
        if ref is None or not _module_exists(ref):
            return None
        module_name, _, attr = ref.partition(":")
        command = getattr(importlib.import_module(module_name), attr, None)
        if not isinstance(command, click.Command):
            raise RuntimeError(f"{module_name} must define a click command named `{attr}`")
        return command


def _module_exists(ref: str) -> bool:
    return importlib.util.find_spec(ref.partition(":")[0]) is not None


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "--version", "-V", prog_name="hpsearch")
def main() -> None:
    """Hyperparameter search for PyTorch on Ray: Tune + Optuna + ASHA over Train trials.

    Start with `hpsearch validate search_spaces/quickstart.yaml`.
    """
