"""``engrain serve``: the HTTP API (and MCP at ``/mcp``) over the usual store settings.

One worker serves every request from one :class:`~engrain.engine.Engine`; with
``--workers N`` uvicorn starts N processes in factory mode and each opens its own engine
over the same store (PostgreSQL, or one SQLite file in WAL mode)."""

from __future__ import annotations

import os
from typing import Any

import click

from engrain.cli.base import State, global_options, pass_state

INSTALL_HINT = "engrain serve needs the 'server' extra: pip install 'engrain[server]'"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


def log_config(level: str) -> dict[str, Any]:
    """Logging for uvicorn and engrain: every line carries the request id (``-`` outside a
    request); uvicorn's own access log is replaced by engrain's, which has it."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "engrain.server.context.RequestIdFilter"}},
        "formatters": {"plain": {"format": LOG_FORMAT}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain",
                                "filters": ["request_id"], "stream": "ext://sys.stderr"}},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "engrain": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
        },
    }  # fmt: skip


@click.command(name="serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind (the default answers this machine only).")
@click.option("--port", default=8420, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port to listen on (0: any free port).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Processes, each with its own engine over the same store.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]),
              help="Least severe log lines printed (each carries its request id).")
@global_options()
@pass_state
def serve_command(state: State, host: str, port: int, workers: int, log_level: str) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, MCP at /mcp) until interrupted.

    Every /v1 request needs 'Authorization: Bearer <key>' (engrain keys create --user ID).
    The store is the usual one (--url, --data-dir, ENGRAIN_URL)."""
    try:
        import uvicorn

        from engrain.server.app import serve_app
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in (
            "fastapi", "uvicorn", "starlette", "mcp", "anyio", "httpx"
        ):  # fmt: skip
            raise
        raise click.ClickException(INSTALL_HINT) from exc
    logging = log_config(log_level)
    if workers == 1:
        app = serve_app(state.engine())
        uvicorn.run(app, host=host, port=port, log_config=logging, access_log=False)
        return
    # each worker process builds its own engine from the environment (factory mode)
    for name, value in (("ENGRAIN_URL", state.url), ("ENGRAIN_DATA_DIR", state.data_dir)):
        if value is not None:
            os.environ[name] = value
    uvicorn.run("engrain.server.app:from_environment", factory=True, host=host, port=port,
                workers=workers, log_config=logging, access_log=False)  # fmt: skip


COMMANDS = [serve_command]
