"""``engrain serve``: the HTTP API, MCP at ``/mcp`` and the web inspector at ``/ui``, over the
usual store settings.

One worker serves every request from one :class:`~engrain.engine.Engine`; with
``--workers N`` uvicorn starts N processes in factory mode and each opens its own engine
over the same store (PostgreSQL, or one SQLite file in WAL mode)."""

from __future__ import annotations

import importlib.util
import inspect
import os
import socket
from typing import Any

import click

from engrain.cli.base import OnceCommand, State, global_options, pass_state
from engrain.errors import ConfigError

#: How long uvicorn's supervisor waits for a worker of ``--workers N`` to answer its health
#: check before it kills and replaces the worker (uvicorn's default: 5 s). A worker answers
#: from a thread that starts only once its interpreter is up and uvicorn imported, and that
#: needs the GIL: a starting worker on a busy machine, or one whose C call (a model load)
#: holds the GIL, is silent for longer. With 5 s, ``serve --workers 2`` at load ~30 on 2
#: cores killed every worker as it started, over and over, and answered nothing for six
#: minutes (session 20, ``bench/attacks/serve_kill9.py``); a hung worker is now replaced
#: after a minute instead.
WORKER_HEALTHCHECK_S = 60
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


@click.command(cls=OnceCommand, name="serve")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to bind (the default answers this machine only).",
)
@click.option(
    "--port",
    default=8420,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="TCP port to listen on (0: any free port).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Processes, each with its own engine over the same store.",
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    help="Least severe log lines printed (each carries its request id).",
)
@click.option(
    "--upstream",
    metavar="URL",
    default=None,
    help="Also serve an OpenAI-compatible proxy with memory (POST "
    "/v1/chat/completions, GET /v1/models) forwarding to this base URL, "
    "e.g. https://api.openai.com/v1 or http://localhost:11434/v1.",
)
@click.option(
    "--upstream-key-env",
    metavar="NAME",
    default=None,
    help="Environment variable holding the upstream's API key, e.g. OPENAI_API_KEY "
    "(the key itself is never a flag: it would show in the process list).",
)
@click.option(
    "--upstream-timeout",
    metavar="SECONDS",
    default=None,
    type=click.FloatRange(0, min_open=True),
    help="Seconds to wait for the upstream to connect, to start its reply and "
    "between two streamed chunks; past it the caller gets 504. [default: 120]",
)
@click.option(
    "--inject",
    "inject",
    default=None,
    type=click.Choice(["system", "append"]),
    help="Where the proxy puts memory: a system message after the request's own "
    "(system), or appended to its first system message (append). "
    "[default: system]",
)
@click.option(
    "--record/--no-record",
    default=None,
    help="Record each proxied exchange into memory in the background (a request "
    "opts out with 'X-Engrain-Record: false'). [default: record]",
)
@global_options()
@pass_state
def serve_command(state: State, host: str, port: int, workers: int, log_level: str,
                  upstream: str | None, upstream_key_env: str | None,
                  upstream_timeout: float | None, inject: str | None,
                  record: bool | None) -> None:  # fmt: skip
    """Serve the HTTP API (OpenAPI at /openapi.json), MCP at /mcp and the web inspector at /ui
    (sign in with an API key) until interrupted.

    Every /v1 request needs 'Authorization: Bearer <key>' (engrain keys create --user ID).
    The store is the usual one (--url, --data-dir, ENGRAIN_URL). With --upstream the
    server is also an OpenAI-compatible proxy that adds each user's memory (docs/proxy.md)."""
    try:
        import uvicorn

        from engrain.server.app import serve_app
        from engrain.server.collector import settle
        from engrain.server.lifespan import on_start
        from engrain.server.proxy import ProxyConfig
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in (
            "fastapi", "uvicorn", "starlette", "mcp", "anyio", "httpx"
        ):  # fmt: skip
            raise
        raise ConfigError(INSTALL_HINT) from exc
    if importlib.util.find_spec("mcp") is None:  # /mcp imports it on its first request
        raise ConfigError(INSTALL_HINT)
    listenable(host, port)
    logging = log_config(log_level)
    # one engine serves many concurrent calls: onnxruntime's spinning threads would take the
    # cores the other requests need (a config file or ENGRAIN_ONNX_SPINNING still decides)
    os.environ.setdefault("ENGRAIN_ONNX_SPINNING", "false")
    proxy = {
        "proxy_upstream": upstream,
        "proxy_upstream_key_env": upstream_key_env,
        "proxy_timeout": upstream_timeout,
        "proxy_inject": inject,
        "proxy_record": record,
    }
    proxy = {k: v for k, v in proxy.items() if v is not None}  # fmt: skip
    if workers == 1:
        engine = state.engine()
        config = ProxyConfig.from_settings(engine.settings.model_validate(
            {**engine.settings.model_dump(), **proxy}))  # fmt: skip
        app = serve_app(engine, proxy=config)
        # the process's long-lived objects out of the collector's passes once it has started
        on_start(app, settle)
        uvicorn.run(app, host=host, port=port, log_config=logging, access_log=False)
        return
    # each worker process builds its own engine from the environment (factory mode)
    given = {"ENGRAIN_URL": state.url, "ENGRAIN_DATA_DIR": state.data_dir,
             **{f"ENGRAIN_{k.upper()}": _env_text(v) for k, v in proxy.items()}}  # fmt: skip
    for name, value in given.items():
        if value is not None:
            os.environ[name] = value
    uvicorn.run("engrain.server.app:from_environment", factory=True, host=host, port=port,
                workers=workers, log_config=logging, access_log=False,
                **_supervision(uvicorn.Config))  # fmt: skip


def listenable(host: str, port: int) -> None:
    """:class:`ConfigError` (one line, exit 3, before the model loads) when nothing can listen
    on ``host``:``port``: a name that does not resolve, an address not on this machine, a
    port in use or one the user may not bind. uvicorn would say it after start-up, as log
    lines around an ``ERROR``. The probe socket is closed at once (``SO_REUSEADDR``, as
    uvicorn binds), so a port taken in between is still uvicorn's to report."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn chooses
        with socket.create_server((host, port), family=family):
            pass
    except OSError as exc:
        reason = (exc.strerror or str(exc)).split(" (while attempting")[0]  # the address: ours
        raise ConfigError(f"cannot listen on {host}:{port}: {reason} (--host, --port)") from exc


def _supervision(config: Any) -> dict[str, Any]:
    """:data:`WORKER_HEALTHCHECK_S` for uvicorn's worker health check, where this uvicorn
    has the setting (0.37 and later; before, its supervisor waited 5 s and had no knob)."""
    if "timeout_worker_healthcheck" in inspect.signature(config).parameters:
        return {"timeout_worker_healthcheck": WORKER_HEALTHCHECK_S}
    return {}


def _env_text(value: object) -> str:
    """A flag's value as its ``ENGRAIN_*`` variable spells it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


COMMANDS = [serve_command]
