"""The ``engrain`` command line: a thin shell over :class:`engrain.Engine`.

The CLI is an extra (``pip install 'engrain[cli]'``). This module imports nothing from it,
so the ``engrain`` script can always start: without click, :func:`main` prints the install
command as its one error line (a JSON object with ``--json``) and exits with 3, the exit of
a set-up failure (:mod:`engrain.cli.base`), as a command whose own extra is missing does.
The commands themselves live in :mod:`engrain.cli.app` and the modules it gathers, which
import click at the top.
"""

from __future__ import annotations

import json
import sys

from engrain.errors import ConfigError

INSTALL_HINT = "the engrain CLI needs the 'cli' extra: pip install 'engrain[cli]'"


def main() -> None:
    """Entry point of the ``engrain`` script."""
    try:
        import click  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "click":  # a broken install of something else: let it show
            raise
        error = ConfigError(INSTALL_HINT)
        as_json = "--json" in sys.argv[1:]
        print(json.dumps(error.to_dict()) if as_json else f"error: {INSTALL_HINT}",
              file=sys.stderr)  # fmt: skip
        sys.exit(3)  # engrain.cli.base.EXIT_FAILURE, which imports click
    from engrain.cli.app import cli

    cli.main(prog_name="engrain")
