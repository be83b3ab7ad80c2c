"""Who is calling, and for which user: ``Authorization: Bearer <key>`` → :class:`ApiKey`
(:class:`engrain.keys.KeyRing`), then the user (and project) the request names checked
against the key's scope.

The user is a hard partition: a request acts for exactly one user, named in the body or
the query (or implied by a key holding exactly one user), and every engine call gets that
user. Memory ids are only ever looked up within it, so another user's id is answered 404
exactly like a missing one. A project-limited key must act in one of its projects: a call
that names none gets the key's only project, or 403 when it has several.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from engrain import feedback, validate
from engrain.engine import Engine
from engrain.errors import NotFoundError, PermissionDeniedError, ValidationError
from engrain.keys import ApiKey, KeyRing
from engrain.model import Memory

bearer = HTTPBearer(
    auto_error=False,
    description="An engrain API key (`engrain keys create --user ID`), scoped to users.",
)


def key_ring(request: Request) -> KeyRing:
    """The app's key ring."""
    keys: KeyRing = request.app.state.keys
    return keys


async def engine_of(request: Request) -> Engine:
    """The app's one engine, shared by every request. ``async``: no I/O, so FastAPI runs
    it in the event loop instead of sending it to the threadpool."""
    engine: Engine = request.app.state.engine
    return engine


def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> ApiKey:
    """The API key of this request; 401 when it is missing, unknown or revoked."""
    secret = credentials.credentials if credentials is not None else None
    return key_ring(request).authenticate(secret)


Caller = Annotated[ApiKey, Depends(caller)]
EngineDep = Annotated[Engine, Depends(engine_of)]


class Scope:
    """The user (and project) one request acts for, checked against its key."""

    def __init__(self, keys: KeyRing, key: ApiKey) -> None:
        self.keys = keys
        self.key = key

    def user(self, user_id: str | None, project: str | None = None) -> str:
        """The user this request acts for (see :meth:`resolve`)."""
        return self.resolve(user_id, project)[0]

    def resolve(self, user_id: str | None, project: str | None = None) -> tuple[str, str | None]:
        """The user and project this request acts for: ``user_id``, else the key's only
        user; ``project``, else a project-limited key's only project. 403 if the key does
        not hold them."""
        project = self.project(project)
        if user_id is None:
            if len(self.key.users) != 1:
                raise ValidationError(
                    "user_id is required: this API key does not hold exactly one user"
                )
            user_id = self.key.users[0]
        user = validate.user_id(user_id)
        self.keys.authorize(self.key, user, project)
        return user, project

    def project(self, project: str | None) -> str | None:
        """``project``, else the only project of a project-limited key."""
        if project is None and len(self.key.projects) == 1 and not self.key.admin:
            return self.key.projects[0]
        return project

    def check_memory(self, memory: Memory) -> Memory:
        """``memory`` if the key may see it; a project-limited key sees only its projects'
        memories, and any other is answered 404 like a missing one."""
        if self.key.projects and not self.key.allows(memory.user_id, memory.project):
            raise NotFoundError(f"no memory {memory.id!r} for user {memory.user_id!r}")
        return memory

    def visible_ids(self, engine: Engine, user: str, memory_ids: Sequence[str]) -> list[str]:
        """``memory_ids`` without those a project-limited key may not see (of another
        project, or missing: the engine skips a missing one in the same way); every id as
        given for any other key."""
        if not self.key.projects:
            return list(memory_ids)
        visible = []
        for memory_id in memory_ids:
            try:
                self.check_memory(engine.get(memory_id, user))
            except NotFoundError:
                continue
            visible.append(memory_id)
        return visible

    def check_context(self, engine: Engine, user: str, context_id: str) -> None:
        """For a project-limited key, 404 (as for an unknown context) unless every memory
        still there of the context ``context_id`` is in one of its projects: feedback on a
        context changes the usefulness of all of them."""
        if not self.key.projects:
            return
        context_id = validate.identifier(context_id, "context_id")
        record = engine.store.get_state(user, feedback.CONTEXTS, context_id)
        if record is None:
            return  # the engine answers 404 for it
        for memory in engine.store.get(user, list(record.get("memory_ids", []))):
            if not self.key.allows(memory.user_id, memory.project):
                raise NotFoundError(f"no context {context_id!r} for user {user!r}")

    def users_for_export(self, user_id: str | None) -> list[str] | None:
        """The users an export may read: the one named, else every user the key holds;
        ``None`` (every user of the store) only for an admin key naming none."""
        if user_id is not None:
            return [self.user(user_id)]
        if self.key.admin:
            return None
        for user in self.key.users:
            self.keys.authorize(self.key, user)  # a project-limited key may not export
        return list(self.key.users)

    def admin(self) -> None:
        """Pass for an admin key, else 403."""
        if not self.key.admin:
            raise PermissionDeniedError(f"API key {self.key.id} is not an admin key")


async def scope(request: Request, key: Caller) -> Scope:
    """The scope dependency of every authenticated route (``async``: no I/O; the key
    itself is read from the store by :func:`caller`, in the threadpool)."""
    return Scope(key_ring(request), key)


ScopeDep = Annotated[Scope, Depends(scope)]
