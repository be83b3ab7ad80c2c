"""Writing and curating memories: remember, ingest, conversations, list, get, update,
forget, pin, mute. Each route resolves the user from the key, makes one engine call and
renders its result with :mod:`engrain.wire`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from engrain import wire
from engrain.errors import NotFoundError
from engrain.model import Turn
from engrain.server import models as m
from engrain.server import paths  # noqa: F401  (registers the {memory_id:memory_id} type)
from engrain.server.auth import EngineDep, Scope, ScopeDep
from engrain.server.responses import errors
from engrain.validate import MAX_INT

router = APIRouter(prefix="/v1", tags=["memories"])

MAX_PAGE = 1000
#: A cursor: the position of the next page, as digits (opaque to callers).
CURSOR_PATTERN = "^[0-9]{1,15}$"

ID = m.ID_RULES
UserQuery = Annotated[str | None, Query(description=m.USER_ID, **ID), m.COMPOSED]
IdQuery = Annotated[str | None, Query(**ID), m.COMPOSED]
MemoryId = Annotated[str, Path(description="The memory's id.", **ID), m.COMPOSED]


#: One memory's own route: any id, "/" included, but none ending in an action (``paths``).
ONE = "/memories/{memory_id:memory_id}"


#: OpenAPI links from a stored memory's id to the routes that take it: a client generator or
#: a stateful test (schemathesis) follows them from ``POST /v1/memories`` to the memory.
STORED_LINKS = {
    name: {"operationId": operation, "parameters": {"memory_id": "$response.body#/memory_id"}}
    for name, operation in [
        ("GetMemory", "get_memory_v1_memories__memory_id__get"),
        ("UpdateMemory", "update_memory_v1_memories__memory_id__patch"),
        ("PinMemory", "pin_v1_memories__memory_id__pin_post"),
        ("MuteMemory", "mute_v1_memories__memory_id__mute_post"),
        ("MemoryRelations", "relations_v1_memories__memory_id__relations_get"),
        ("ForgetMemory", "forget_v1_memories__memory_id__delete"),
    ]
}


@router.post("/memories", status_code=201, response_model=m.OutcomeOut,
             responses={**errors(404), 201: {"links": STORED_LINKS}})  # fmt: skip
def remember(body: m.RememberRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """Store one typed item as given (`Engine.remember`): no chunking, no importance
    discard; a near-duplicate of a recent memory of the same kind is updated instead."""
    user, project = s.resolve(body.user_id, body.project)
    fields = body.model_dump(exclude={"user_id", "project", "content"})
    return wire.dump_outcome(engine.remember(body.content, user, project=project, **fields))


@router.post("/ingest", response_model=m.IngestReportOut, responses=errors())
def ingest(body: m.IngestRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """Clean, chunk, score, route and store free text (`Engine.ingest`); the report says
    what happened to every chunk."""
    user, project = s.resolve(body.user_id, body.project)
    fields = body.model_dump(exclude={"user_id", "project", "text"})
    return wire.dump_ingest_report(engine.ingest(body.text, user, project=project, **fields))


@router.post("/conversations", response_model=m.IngestReportOut, responses=errors())
def conversations(body: m.ConversationRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """Store a session's turns at once (`Engine.ingest_conversation`)."""
    user, project = s.resolve(body.user_id, body.project)
    turns = [Turn(t.speaker, t.text, t.turn_id, t.at) for t in body.turns]
    fields = body.model_dump(exclude={"user_id", "project", "turns"})
    report = engine.ingest_conversation(turns, user, project=project, **fields)
    return wire.dump_ingest_report(report)


def _offset(cursor: str | None) -> int:
    """The position a cursor of :func:`_cursor` stands for (its pattern is checked by the
    request model: digits only). A position past the engine's bound on offsets is past
    every memory: the empty last page, as the schema promises for any digits."""
    return 0 if cursor is None else min(int(cursor), MAX_INT)


def _cursor(offset: int) -> str:
    return str(offset)


@router.get("/memories", response_model=m.MemoryPage, responses=errors())
def list_memories(
    s: ScopeDep,
    engine: EngineDep,
    user_id: UserQuery = None,
    project: IdQuery = None,
    memory_type: m.MemoryType | None = None,
    kind: m.Kind | None = None,
    session_id: IdQuery = None,
    include_compressed: bool = True,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[
        str | None, Query(description="`next_cursor` of the previous page.", pattern=CURSOR_PATTERN)
    ] = None,
) -> dict[str, Any]:
    """The user's memories, most recently updated first (`Engine.list`), a page at a time.
    The cursor is a position: memories written between two pages may shift the next page
    by as many places."""
    user, project = s.resolve(user_id, project)
    offset = _offset(cursor)
    found = engine.list(user, project=project, memory_type=memory_type, kind=kind,
                        session_id=session_id, include_compressed=include_compressed,
                        limit=limit + 1, offset=offset)  # fmt: skip
    more = len(found) > limit
    return {"memories": [wire.dump_memory(x) for x in found[:limit]],
            "next_cursor": _cursor(offset + limit) if more else None}  # fmt: skip


@router.post("/forget", response_model=m.ForgottenOut, responses=errors())
def forget_many(body: m.ForgetRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """Delete several memories of the user at once, atomically (`Engine.forget`);
    `forgotten` is how many of them existed."""
    user = s.user(body.user_id)
    ids = s.visible_ids(engine, user, body.memory_ids)
    return {"forgotten": engine.forget(ids, user) if ids else 0}


def _id_user(s: Scope, user_id: str | None) -> str:
    """The user of a route naming a memory by id. A project-limited key is checked against
    the memory's own project once it is read (:meth:`Scope.check_memory`), so here only
    against the user (with any of its projects)."""
    return s.user(user_id, s.key.projects[0] if s.key.projects else None)


def _visible(s: Scope, engine: EngineDep, memory_id: str, user: str) -> None:
    """For a project-limited key: 404 unless the memory is in one of its projects."""
    if s.key.projects:
        s.check_memory(engine.get(memory_id, user))


@router.get(ONE, response_model=m.MemoryOut, responses=errors(404))
def get_memory(
    memory_id: MemoryId, s: ScopeDep, engine: EngineDep, user_id: UserQuery = None
) -> dict[str, Any]:
    """One memory of the user (`Engine.get`); another user's id is 404 like a missing one."""
    user = _id_user(s, user_id)
    return wire.dump_memory(s.check_memory(engine.get(memory_id, user)))


@router.patch(ONE, response_model=m.MemoryOut, responses=errors(404))
def update_memory(
    memory_id: MemoryId, body: m.UpdateRequest, s: ScopeDep, engine: EngineDep,
    user_id: UserQuery = None,
) -> dict[str, Any]:  # fmt: skip
    """Change the fields present in the body (`Engine.update`); a new content is
    re-embedded. Returns the memory as it now is."""
    user = _id_user(s, user_id)
    changes = body.model_dump(exclude_unset=True)
    if s.key.projects and "project" in changes:
        s.keys.authorize(s.key, user, changes["project"])
    _visible(s, engine, memory_id, user)
    return wire.dump_memory(engine.update(memory_id, user, **changes))


@router.delete(ONE, response_model=m.ForgottenOut, responses=errors(404))
def forget(
    memory_id: MemoryId, s: ScopeDep, engine: EngineDep, user_id: UserQuery = None
) -> dict[str, Any]:
    """Delete one memory (`Engine.forget`); 404 if the user has no memory with that id."""
    user = _id_user(s, user_id)
    _visible(s, engine, memory_id, user)
    if not engine.forget(memory_id, user):
        raise NotFoundError(f"no memory {memory_id!r} for user {user!r}")
    return {"forgotten": 1}


@router.post("/memories/{memory_id:path}/pin", response_model=m.MemoryOut, responses=errors(404))
def pin(
    memory_id: MemoryId, s: ScopeDep, engine: EngineDep, body: m.FlagRequest | None = None,
    user_id: UserQuery = None,
) -> dict[str, Any]:  # fmt: skip
    """Pin (`{"value": true}`, the default) or unpin a memory (`Engine.pin`): pinned
    memories are injected whenever the budget allows."""
    body = body or m.FlagRequest()
    user = _id_user(s, user_id)
    _visible(s, engine, memory_id, user)
    return wire.dump_memory(engine.pin(memory_id, user, body.value, now=body.now))


@router.post("/memories/{memory_id:path}/mute", response_model=m.MemoryOut, responses=errors(404))
def mute(
    memory_id: MemoryId, s: ScopeDep, engine: EngineDep, body: m.FlagRequest | None = None,
    user_id: UserQuery = None,
) -> dict[str, Any]:  # fmt: skip
    """Mute (`{"value": true}`, the default) or unmute a memory (`Engine.mute`): muted
    memories are never injected."""
    body = body or m.FlagRequest()
    user = _id_user(s, user_id)
    _visible(s, engine, memory_id, user)
    return wire.dump_memory(engine.mute(memory_id, user, body.value, now=body.now))
