"""The ``engrain`` group: its global options and every command, gathered from the modules
that define them (:mod:`engrain.cli.memories`, :mod:`engrain.cli.transfer`)."""

from __future__ import annotations

import click

from engrain.cli import keys, mcp, memories, serve, transfer
from engrain.cli.base import EngrainGroup, global_options


@click.group(cls=EngrainGroup, context_settings={"help_option_names": ["-h", "--help"]})
@global_options(top=True)
@click.version_option(package_name="engrain")
def cli() -> None:
    """engrain: long-term memory for LLM applications.

    The options --url, --data-dir, --json and --user/-u go before or after the command.
    Exit codes: 0 ok, 1 not found, 2 usage or invalid input, 3 configuration, store or
    model failure."""


_COMMANDS = [*memories.COMMANDS, *transfer.COMMANDS, *mcp.COMMANDS, *keys.COMMANDS, *serve.COMMANDS]
for _command in _COMMANDS:
    cli.add_command(_command)
