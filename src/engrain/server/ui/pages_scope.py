"""What the analysis pages (try, tiers, conflicts, activity) share: the project a page
shows, and the checks that keep a project-limited key inside its projects. Checks only:
every page still makes one engine call for what it shows."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import Request

from engrain.engine import Engine
from engrain.errors import NotFoundError
from engrain.keys import KeyRing
from engrain.model import Memory
from engrain.server.ui.session import UiSession, root


def blank(value: str | None) -> str | None:
    """A form field as a value: ``None`` for a missing or blank field (browsers send the
    empty fields of a GET form as ``name=``)."""
    if value is None:
        return None
    value = value.strip()
    return value or None


def project_for(request: Request, session: UiSession, project: str | None) -> str | None:
    """The project a page shows: the one asked for, else a project-limited key's first
    (``None``: every project); :class:`PermissionDeniedError` when the key may not see it."""
    chosen = blank(project)
    key = session.key
    if chosen is None and key.projects and not key.admin:
        chosen = key.projects[0]
    keys: KeyRing = request.app.state.keys
    keys.authorize(key, session.user_id, chosen)
    return chosen


def visible(session: UiSession, memory: Memory) -> Memory:
    """``memory`` if the key may see it; a memory of a project outside a project-limited
    key's is answered as missing (404), like another user's."""
    if not session.key.allows(memory.user_id, memory.project):
        raise NotFoundError(f"no memory {memory.id!r} for user {memory.user_id!r}")
    return memory


def memories_of(engine: Engine, session: UiSession, ids: list[str]) -> list[Memory]:
    """The viewed user's memories with these ids (:class:`NotFoundError` for one missing
    or outside the key's projects)."""
    return [visible(session, engine.get(memory_id, session.user_id)) for memory_id in ids]


def back(request: Request, path: str, **query: str | None) -> str:
    """A path inside the UI with a query string of the values given (blank ones left out)."""
    params = {k: v for k, v in query.items() if v}
    return root(request) + path + ("?" + urlencode(params) if params else "")
