"""Liveness, readiness and metrics: no API key (probes and scrapers hold none); none of
them reveals a memory."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from engrain.errors import EngrainError, StoreError
from engrain.server import models as m
from engrain.server.auth import EngineDep
from engrain.server.responses import PUBLIC

router = APIRouter(tags=["health"])

#: A user id no caller can hold (it has a space and a slash): readiness reads its revision.
_PROBE_USER = "engrain readiness/probe"


@router.get("/healthz", response_model=m.StatusOut)
def healthz() -> dict[str, str]:
    """Liveness: the process answers. Touches nothing else."""
    return {"status": "ok"}


@router.get("/readyz", response_model=m.StatusOut, responses=PUBLIC)
def readyz(engine: EngineDep) -> dict[str, str]:
    """Readiness: the engine admits a call and its store answers a read (503
    `store_error` when either does not: a closed engine refuses every call, whatever its
    store would still answer)."""
    try:
        with engine.gate.call():  # admitted as every engine call is, or the closed error
            engine.store.revision(_PROBE_USER)
    except EngrainError:
        raise
    except Exception as exc:  # a driver error the store did not translate: still "not ready"
        raise StoreError(f"the store did not answer: {type(exc).__name__}") from exc
    return {"status": "ok"}


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                     "description": "Prometheus text format 0.0.4."}},
)  # fmt: skip
def metrics(request: Request) -> PlainTextResponse:
    """Request counts and latencies per route, in the Prometheus text format."""
    text = request.app.state.metrics.render()
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")
