"""The memory pages: the table of the viewed user's memories (search, filters, sort, keyset
pages: :meth:`Engine.browse`) and each memory's page with its actions.

Every change is a POST carrying the CSRF token and makes one engine call (``update``,
``pin``, ``mute``, ``forget``, ``resolve(..., "correct")``), then redirects (303) back to
a page that shows the result. A memory is only ever looked up within the user viewed, so
another user's id is answered with the same 404 page as a missing one; a project-limited
key sees (and changes) only its projects' memories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from engrain.browse import Sort
from engrain.corrections import CONFLICTS_WITH, CORRECTS, conflicts_of
from engrain.errors import NotFoundError, ValidationError
from engrain.model import Kind, Memory, MemoryType
from engrain.server import paths  # noqa: F401  (registers the {memory_id:memory_id} type)
from engrain.server.ui.render import engine_of, page
from engrain.server.ui.session import SessionDep, UiSession, check_csrf, root
from engrain.wire import path_segment

router = APIRouter()

#: What the tri-state filters accept: any, only those, none of those.
_TRI = {"": None, "yes": True, "no": False}
#: The notices a change redirects with (``?done=``), by action.
NOTICES = {
    "edited": "Saved.",
    "pinned": "Pinned: injected whenever the budget allows.",
    "unpinned": "Unpinned.",
    "muted": "Muted: never injected.",
    "unmuted": "Unmuted.",
    "corrected": "Marked as the correction: the other memory is superseded.",
    "forgotten": "Forgotten.",
}
FILTER_FIELDS = ("q", "type", "kind", "domain", "project", "pinned", "muted", "superseded",
                 "conflicting", "sort")  # fmt: skip


@dataclass(frozen=True)
class Filters:
    """The table's query string, as typed (echoed back into the form)."""

    q: str = ""
    type: str = ""
    kind: str = ""
    domain: str = ""
    project: str = ""
    pinned: str = ""
    muted: str = ""
    superseded: str = ""
    conflicting: str = ""
    sort: str = ""

    def query(self, **changes: str) -> str:
        """This query string with ``changes`` (empty values left out)."""
        values = {name: getattr(self, name) for name in FILTER_FIELDS} | changes
        return urlencode({k: v for k, v in values.items() if v})


def _tri(value: str, field: str) -> bool | None:
    if value not in _TRI:
        raise ValidationError(f"{field}: expected yes, no or nothing")
    return _TRI[value]


def _projects(session: UiSession) -> tuple[str, ...] | None:
    """The projects a project-limited key sees (``None``: all of the user's)."""
    key = session.key
    return None if key.admin or not key.projects else key.projects


def _visible(session: UiSession, memory: Memory) -> Memory:
    """``memory`` if the key may see it, else the 404 a missing memory gets."""
    allowed = _projects(session)
    if allowed is not None and memory.project not in allowed:
        raise NotFoundError(f"no memory {memory.id!r} for user {session.user_id!r}")
    return memory


def _memory(request: Request, session: UiSession, memory_id: str) -> Memory:
    return _visible(session, engine_of(request).get(memory_id, session.user_id))


@router.get("/memories", response_class=HTMLResponse)
def memories(
    request: Request,
    session: SessionDep,
    q: str = "",
    type: str = "",
    kind: str = "",
    domain: str = "",
    project: str = "",
    pinned: str = "",
    muted: str = "",
    superseded: str = "",
    conflicting: str = "",
    sort: str = "",
    cursor: Annotated[str | None, Query()] = None,
    done: str | None = None,
) -> HTMLResponse:
    """The table of the user's memories: search, filters, sort and pages."""
    filters = Filters(q, type, kind, domain, project, pinned, muted, superseded,
                      conflicting, sort)  # fmt: skip
    engine = engine_of(request)
    result = engine.browse(
        session.user_id, text=q or None, memory_types=[type] if type else None,
        kinds=[kind] if kind else None, domain=domain or None, project=project or None,
        pinned=_tri(pinned, "pinned"), muted=_tri(muted, "muted"),
        superseded=_tri(superseded, "superseded"), conflicting=_tri(conflicting, "conflicting"),
        sort=sort or None, cursor=cursor or None, projects=_projects(session),
    )  # fmt: skip
    next_url = None
    if result.next_cursor is not None:
        next_url = f"{root(request)}/memories?{filters.query(cursor=result.next_cursor)}"
    return page(
        request, "memories.html", session,
        filters=filters, result=result, next_url=next_url, first_page=cursor is not None,
        first_url=f"{root(request)}/memories?{filters.query()}",
        types=[t.value for t in MemoryType], kinds=[k.value for k in Kind],
        sorts=[s.value for s in Sort], conflicted=lambda m: bool(conflicts_of(m)),
        notice=NOTICES.get(done or ""),
    )  # fmt: skip


@router.get("/memories/{memory_id:memory_id}", response_class=HTMLResponse)
def memory_page(
    request: Request, session: SessionDep, memory_id: str, done: str | None = None
) -> HTMLResponse:
    """One memory: what it says, where it came from, how it was used, its relations and
    its actions."""
    memory = _memory(request, session, memory_id)
    relations = engine_of(request).relations(memory.id, session.user_id)
    allowed = _projects(session)
    conflicts = [m for m in relations.conflicts if allowed is None or m.project in allowed]
    corrects = [m for m in relations.corrects if allowed is None or m.project in allowed]
    meta = dict(memory.provenance.metadata)
    history = meta.pop("history", None)  # earlier texts of a merged memory, by the ingest
    meta.pop(CONFLICTS_WITH, None)  # shown as links below
    meta.pop(CORRECTS, None)
    return page(
        request, "memory.html", session,
        memory=memory, conflicts=conflicts, corrects=corrects,
        corrected_by=relations.corrected_by, other_meta=meta,
        history=[h for h in history if isinstance(h, dict)] if isinstance(history, list) else [],
        kinds=[k.value for k in Kind], notice=NOTICES.get(done or ""),
    )  # fmt: skip


def _back(request: Request, memory_id: str, done: str) -> RedirectResponse:
    return RedirectResponse(
        f"{root(request)}/memories/{path_segment(memory_id)}?done={done}", status_code=303
    )


@router.post("/memories/{memory_id:path}/edit")
def edit(
    request: Request,
    session: SessionDep,
    memory_id: str,
    content: Annotated[str, Form()],
    kind: Annotated[str, Form()],
    importance: Annotated[float, Form()],
    domains: Annotated[str, Form()] = "",
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Save the edit form: content, kind, importance and domains (comma-separated)."""
    check_csrf(request, session, csrf)
    memory = _memory(request, session, memory_id)
    tags = [t.strip() for t in domains.split(",") if t.strip()]
    engine_of(request).update(memory.id, session.user_id, content=content, kind=kind,
                              importance=importance, domains=tags)  # fmt: skip
    return _back(request, memory.id, "edited")


@router.post("/memories/{memory_id:path}/pin")
def pin(
    request: Request,
    session: SessionDep,
    memory_id: str,
    pinned: Annotated[str, Form()] = "yes",
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Pin (``pinned=yes``) or unpin (``no``) the memory."""
    check_csrf(request, session, csrf)
    flag = _flag(pinned, "pinned")
    memory = _memory(request, session, memory_id)
    engine_of(request).pin(memory.id, session.user_id, flag)
    return _back(request, memory.id, "pinned" if flag else "unpinned")


@router.post("/memories/{memory_id:path}/mute")
def mute(
    request: Request,
    session: SessionDep,
    memory_id: str,
    muted: Annotated[str, Form()] = "yes",
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Mute (``muted=yes``) or unmute (``no``) the memory."""
    check_csrf(request, session, csrf)
    flag = _flag(muted, "muted")
    memory = _memory(request, session, memory_id)
    engine_of(request).mute(memory.id, session.user_id, flag)
    return _back(request, memory.id, "muted" if flag else "unmuted")


@router.post("/memories/{memory_id:path}/forget", response_class=HTMLResponse)
def forget(
    request: Request,
    session: SessionDep,
    memory_id: str,
    confirmed: Annotated[str, Form()] = "",
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Forget the memory once confirmed (``confirmed=yes``: the script's dialog, or the
    confirmation page this answers with otherwise)."""
    check_csrf(request, session, csrf)
    memory = _memory(request, session, memory_id)
    if confirmed != "yes":
        return page(request, "forget.html", session, memory=memory)
    engine_of(request).forget(memory.id, session.user_id)
    return RedirectResponse(f"{root(request)}/memories?done=forgotten", status_code=303)


@router.post("/memories/{memory_id:path}/correct")
def correct(
    request: Request,
    session: SessionDep,
    memory_id: str,
    corrects: Annotated[str, Form()],
    csrf: Annotated[str | None, Form()] = None,
) -> Response:
    """Mark this memory as the correction of the memory ``corrects`` (which is then
    superseded), as :meth:`Engine.resolve` does for a reviewed pair."""
    check_csrf(request, session, csrf)
    memory = _memory(request, session, memory_id)
    target = _memory(request, session, corrects.strip())
    engine_of(request).resolve(memory.id, target.id, session.user_id, "correct")
    return _back(request, memory.id, "corrected")


def _flag(value: str, field: str) -> bool:
    flag = _TRI.get(value)
    if flag is None:
        raise ValidationError(f"{field}: expected yes or no")
    return flag
