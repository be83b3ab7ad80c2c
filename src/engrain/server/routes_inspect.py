"""The inspector's reads and curation over HTTP: browse, relations, the review queue and its
resolutions, recent contexts, a preview of ``context()``, the users. Each route resolves
the user (and project) from the key, makes one engine call and renders its result with
:mod:`engrain.wire`.

A project-limited key stays in its projects: ``browse`` is limited to them (``projects``),
the review queue, the contexts and a preview are read in one of them (``project``, else
the key's only one), and a memory of another project is answered 404 like a missing one
(the relations of a memory leave such memories out)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from engrain import wire
from engrain.browse import Relations
from engrain.model import Memory
from engrain.server import models as m
from engrain.server.auth import EngineDep, Scope, ScopeDep
from engrain.server.responses import errors

router = APIRouter(prefix="/v1", tags=["inspect"])

ID = m.ID_RULES
UserQuery = Annotated[str | None, Query(description=m.USER_ID, **ID), m.COMPOSED]
IdQuery = Annotated[str | None, Query(**ID), m.COMPOSED]
MemoryId = Annotated[str, Path(description="The memory's id.", **ID), m.COMPOSED]


def _id_user(s: Scope, user_id: str | None) -> str:
    """The user of a route naming memories by id: checked against the user here (with any
    project of a project-limited key), against each memory's project once it is read."""
    return s.user(user_id, s.key.projects[0] if s.key.projects else None)


def _limited(s: Scope) -> bool:
    return bool(s.key.projects) and not s.key.admin


@router.post("/browse", response_model=m.PageOut, responses=errors())
def browse(s: ScopeDep, engine: EngineDep, body: m.BrowseRequest | None = None) -> dict[str, Any]:
    """A page of the user's memories for people to look through (`Engine.browse`): `text`
    searches (best first), the filters narrow, `sort` orders; pass `next_cursor` back as
    `cursor` (with the same search, filters and sort) for the next page. Reads only; no
    body is the first page of every memory of the key's only user."""
    body = body or m.BrowseRequest()
    user = s.user(body.user_id, body.project) if body.project else _id_user(s, body.user_id)
    projects = body.projects
    if _limited(s):  # only its own projects: the ones named (each checked), else all of them
        for project in projects or ():
            s.keys.authorize(s.key, user, project)
        projects = projects or list(s.key.projects)
    fields = body.model_dump(exclude={"user_id", "projects"})
    return wire.dump_page(engine.browse(user, projects=projects, **fields))


@router.get("/memories/{memory_id:path}/relations", response_model=m.RelationsOut,
            responses=errors(404))  # fmt: skip
def relations(
    memory_id: MemoryId, s: ScopeDep, engine: EngineDep, user_id: UserQuery = None
) -> dict[str, Any]:
    """The memory's conflicts, the memories it corrected and the one correcting it
    (`Engine.relations`); another user's id is 404 like a missing one."""
    user = _id_user(s, user_id)
    if _limited(s):
        s.check_memory(engine.get(memory_id, user))
    found = engine.relations(memory_id, user)
    if _limited(s):
        found = Relations(
            [x for x in found.conflicts if _sees(s, x)],
            [x for x in found.corrects if _sees(s, x)],
            found.corrected_by if _sees(s, found.corrected_by) else None,
        )
    return wire.dump_relations(found)


def _sees(s: Scope, memory: Memory | None) -> bool:
    return memory is not None and s.key.allows(memory.user_id, memory.project)


@router.get("/review", response_model=m.ReviewOut, responses=errors())
def review(
    s: ScopeDep,
    engine: EngineDep,
    user_id: UserQuery = None,
    project: IdQuery = None,
    limit: Annotated[int, Query(ge=1, le=m.MAX_INT)] = 50,
) -> dict[str, Any]:
    """The review queue (`Engine.review`): pairs of the user's active memories flagged as
    conflicting, newest first, then near-duplicates ingestion did not merge, closest first;
    at most `limit` pairs. Reads only."""
    user, project = s.resolve(user_id, project)
    pairs = engine.review(user, project=project, limit=limit)
    return {"pairs": [wire.dump_flagged_pair(p) for p in pairs]}


@router.post("/review/resolve", response_model=m.ResolvedOut, responses=errors(404))
def resolve(body: m.ResolveRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """Resolve a reviewed pair in one transaction (`Engine.resolve`): `keep` the first
    memory and forget the other, the first `correct`s (supersedes) the other, or keep
    `both` (their flags on each other are cleared; the pair is not queued again). A memory
    of another user is 404 like a missing one."""
    user = _id_user(s, body.user_id)
    if _limited(s):
        for memory_id in (body.memory_id, body.other_id):
            s.check_memory(engine.get(memory_id, user))
    result = engine.resolve(body.memory_id, body.other_id, user, body.resolution, now=body.now)
    return wire.dump_resolved(result)


@router.get("/contexts", response_model=m.ContextsOut, responses=errors())
def contexts(
    s: ScopeDep,
    engine: EngineDep,
    user_id: UserQuery = None,
    project: IdQuery = None,
    limit: Annotated[int, Query(ge=1, le=m.MAX_INT)] = 20,
) -> dict[str, Any]:
    """The user's most recent recorded contexts (those that injected memories), newest
    first (`Engine.contexts`): when, the memories injected (those still stored) and the
    feedback given. With `project`, only contexts whose memories all belong to it."""
    user, project = s.resolve(user_id, project)
    found = engine.contexts(user, project=project, limit=limit)
    return {"contexts": [wire.dump_context_record(c) for c in found]}


@router.post("/preview", response_model=m.PreviewOut, responses=errors())
def preview(body: m.PreviewRequest, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """What `POST /v1/context` would return for a message (`Engine.preview`): the tier,
    the exact block, the memories it holds, and the gating pipeline's explanation. Writes
    nothing: no use counted, no context recorded, no tier compiled."""
    user, project = s.resolve(body.user_id, body.project)
    fields = body.model_dump(exclude={"user_id", "project", "message"})
    return wire.dump_preview(engine.preview(body.message, user, project=project, **fields))


@router.get("/users", response_model=m.UsersOut, responses=errors())
def users(s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """The users with memories (`Engine.users`): those the key holds; an admin key sees
    every user of the store."""
    found = engine.users()
    return {"users": found if s.key.admin else [u for u in found if u in s.key.users]}
