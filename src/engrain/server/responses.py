"""The error responses each route declares in the OpenAPI document (all in one shape)."""

from __future__ import annotations

from typing import Any

from engrain.server.models import ErrorOut

_DESCRIPTIONS = {
    400: "Invalid input: the engine refused a value (`error` names the rule).",
    401: "No API key, or an unknown or revoked one (`WWW-Authenticate: Bearer`).",
    403: "The key does not hold this user (or project), or is not an admin key.",
    404: "No such memory or context for this user.",
    413: "The body (or a text in it) is larger than the server's limit.",
    422: "The body or query does not fit the request schema.",
    503: "The store or the model is unavailable, or the request ran past the time limit.",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: every error it may answer, with the error schema."""
    wanted = sorted({400, 401, 403, 413, 422, 503, *statuses})
    return {s: {"model": ErrorOut, "description": _DESCRIPTIONS[s]} for s in wanted}


PUBLIC: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorOut, "description": _DESCRIPTIONS[503]}
}
