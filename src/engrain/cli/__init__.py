"""The ``engrain`` command line: a thin shell over :class:`engrain.Engine`.

The CLI is an extra (``pip install 'engrain[cli]'``). This module imports nothing from it,
so the ``engrain`` script can always start: without click, :func:`main` prints the install
command and exits with 1. The commands themselves live in :mod:`engrain.cli.app` and the
modules it gathers, which import click at the top.
"""

from __future__ import annotations

import sys

INSTALL_HINT = "the engrain CLI needs the 'cli' extra: pip install 'engrain[cli]'"


def main() -> None:
    """Entry point of the ``engrain`` script."""
    try:
        import click  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "click":  # a broken install of something else: let it show
            raise
        sys.exit(INSTALL_HINT)
    from engrain.cli.app import cli

    cli.main(prog_name="engrain")
