"""Import and export as streamed NDJSON (one JSON record per line, the format of
``engrain export``/``engrain import``: ``engrain/records.py``).

The import body is read as it arrives and handed line by line to ``Engine.import_records``
running in a worker thread; every record must name a user the key holds (a record naming
none gets the key's only user). The engine validates every record before it writes
anything and writes them in one transaction, so a refused line, a record of a user the key
does not hold or a body past the size limit writes nothing. The export streams the users
the key holds (an admin key: every user, or ``?user_id=``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from engrain import validate, wire
from engrain.engine import Engine
from engrain.errors import EngrainError, ValidationError
from engrain.server import models as m
from engrain.server.auth import EngineDep, Scope, ScopeDep
from engrain.server.responses import errors

router = APIRouter(prefix="/v1", tags=["transfer"])

NDJSON = "application/x-ndjson"
_RECORD_SCHEMA = {"type": "object", "description": "one record (see docs/http-api.md)"}


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[tuple[int, bytes]]:
    """Numbered lines of a streamed body (blank lines skipped)."""
    pending = b""
    number = 0
    async for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            number += 1
            if line.strip():
                yield number, line
    if pending.strip():
        yield number + 1, pending


def _record(number: int, line: bytes, s: Scope) -> dict[str, Any]:
    """One parsed line, its user checked against the key (and filled in when the key holds
    exactly one); a refusal names the line."""
    record = validate.json_document(line, f"line {number}")
    try:
        return _checked(record, s)
    except EngrainError as exc:
        raise type(exc)(f"line {number}: {exc.message}") from exc


def _checked(record: object, s: Scope) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise ValidationError("not a JSON object")
    user = record.get("user_id")
    if user is not None and not isinstance(user, str):
        raise ValidationError("user_id must be a string")
    project = record.get("project")
    if project is not None and not isinstance(project, str):
        raise ValidationError("project must be a string")
    if user is None:
        user = s.user(None, project)
    s.keys.authorize(s.key, user, project)
    record["user_id"] = user
    return record


class _Records:
    """The body's records as a plain iterator, for the engine's worker thread: each step
    fetches the next line from the event loop (``anyio.from_thread``)."""

    def __init__(self, request: Request, s: Scope) -> None:
        self.lines = _lines(request.stream())
        self.scope = s
        self.numbers: list[int] = []  # the line of each record handed on, in order

    async def _next(self) -> tuple[int, bytes] | None:
        try:
            return await self.lines.__anext__()
        except StopAsyncIteration:
            return None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while (item := anyio.from_thread.run(self._next)) is not None:
            record = _record(*item, self.scope)
            self.numbers.append(item[0])
            yield record

    def at_line(self, error: ValidationError) -> ValidationError:
        """``error`` about "record N" (the engine counts records) about the line of the
        body it came from instead (a blank line is a line the engine never saw)."""
        number, sep, rest = error.message.removeprefix("record ").partition(": ")
        if not (error.message.startswith("record ") and sep and number.isdigit()):
            return error
        index = int(number) - 1
        if not 0 <= index < len(self.numbers):
            return error
        return type(error)(f"line {self.numbers[index]}: {rest}")


@router.post(
    "/import",
    response_model=m.ImportOut,
    responses=errors(),
    openapi_extra={"requestBody": {"required": False, "content": {
        NDJSON: {"schema": {"type": "string", "description": "one JSON record per line"}}}}},
)  # fmt: skip
async def import_records(request: Request, s: ScopeDep, engine: EngineDep) -> dict[str, Any]:
    """Load NDJSON records (`Engine.import_records`): exported memories, state documents,
    conversations, texts and hand-written memories. All or nothing."""
    records = _Records(request, s)
    try:
        result = await anyio.to_thread.run_sync(engine.import_records, records)
    except ValidationError as exc:
        raise records.at_line(exc) from exc
    return wire.dump_import(result)


def _export(engine: Engine, users: list[str] | None) -> Iterator[bytes]:
    for user in [None] if users is None else users:
        for record in engine.export_records(user):
            yield (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"description": "One JSON record per line, oldest first per user.",
                     "content": {NDJSON: {"schema": _RECORD_SCHEMA}}}, **errors()},
)  # fmt: skip
def export_records(
    s: ScopeDep,
    engine: EngineDep,
    user_id: Annotated[str | None, Query(description="One user (default: every user the "
                                         "key holds; an admin key: every user).",
                                         **m.ID_RULES), m.COMPOSED] = None,
) -> StreamingResponse:  # fmt: skip
    """Every memory of the users the key holds as NDJSON (`Engine.export_records`),
    embeddings and learned state included: the input of `POST /v1/import`."""
    users = s.users_for_export(user_id)
    return StreamingResponse(_export(engine, users), media_type=NDJSON)
