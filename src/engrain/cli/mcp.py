"""``engrain mcp``: the MCP server over stdio, for one user, for desktop assistants and IDE
agents that start it as a subprocess (see docs/mcp.md)."""

from __future__ import annotations

import click

from engrain.cli.base import OnceCommand, State, global_options, pass_state
from engrain.errors import ConfigError

INSTALL_HINT = "engrain mcp needs the 'server' extra: pip install 'engrain[server]'"


@click.command(cls=OnceCommand, name="mcp")
@global_options()
@pass_state
def mcp_command(state: State) -> None:
    """Serve the user's memory to an MCP client over stdin and stdout.

    The user is required: --user ID or ENGRAIN_USER. The store is the usual one (--url,
    --data-dir, ENGRAIN_URL). Tools: remember, context, recall, explain, list_memories,
    forget, pin, mute, feedback; resources: engrain://tiers/1 and engrain://tiers/2."""
    if not state.user_explicit:
        raise click.UsageError("engrain mcp serves one user: give --user ID or set ENGRAIN_USER")
    try:
        from engrain.mcp import serve_stdio
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in ("mcp", "starlette", "anyio"):
            raise
        raise ConfigError(INSTALL_HINT) from exc
    serve_stdio(state.engine(), state.user)


COMMANDS = [mcp_command]
