"""engrain as an MCP server (the official ``mcp`` SDK): the same tools over stdio
(``engrain mcp``, one user fixed by ``--user``) and over streamable HTTP (mounted at
``/mcp`` on ``engrain serve``, the user from the request's API key).

Tools: ``remember``, ``context``, ``recall``, ``explain``, ``list_memories``, ``forget``,
``pin``, ``mute``, ``feedback``; resources: the compiled tiers ``engrain://tiers/1`` and
``engrain://tiers/2`` (``?project=`` for one project's). Each tool makes one call into the
:class:`~engrain.engine.Engine`; an :class:`~engrain.errors.EngrainError` becomes a tool
error with its code and message.

This package needs the ``server`` extra (``pip install 'engrain[server]'``); ``import
engrain`` never imports it.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context

from engrain import validate
from engrain.engine import Engine
from engrain.errors import PermissionDeniedError
from engrain.mcp.http import MCPApp, key_user, mount, request_key, streamable_http_app
from engrain.mcp.tools import EngrainMCP, Resolver, build_server


def fixed_user(user_id: str) -> Resolver:
    """Resolve every call to ``user_id`` (stdio: the one user the process serves); a call
    naming another user is refused (:class:`PermissionDeniedError`)."""
    user = validate.user_id(user_id)

    def resolve(ctx: Context, asked: str | None, project: str | None) -> str:
        if asked is not None and validate.user_id(asked) != user:
            raise PermissionDeniedError(f"this MCP server acts for user {user!r} only")
        return user

    return resolve


def serve_stdio(engine: Engine, user_id: str) -> None:
    """Serve ``engine`` for ``user_id`` over stdin and stdout until the client leaves."""
    build_server(engine, fixed_user(user_id)).run("stdio")


__all__ = [
    "EngrainMCP",
    "MCPApp",
    "Resolver",
    "build_server",
    "fixed_user",
    "key_user",
    "mount",
    "request_key",
    "serve_stdio",
    "streamable_http_app",
]
