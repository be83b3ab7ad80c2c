"""The remote calls of :class:`~engrain.client.Client` and :class:`~engrain.client.AsyncClient`,
without any I/O: each function takes :class:`~engrain.engine.Engine`'s arguments, validates
them with the engine's own checks (so a bad argument raises the same error, before any
request), and is a generator that yields the :class:`Req` it needs sent and receives the
decoded JSON answer, then returns the result type the engine returns (rebuilt by
:mod:`engrain.wire`).

The sync and async clients only drive these generators (``Client._run`` and
``AsyncClient._run``), so the two stay twins by construction. Limits the engine checks
against its settings (``max_text_chars``) are the server's: a client does not know them,
and the server answers with the same error class (``InputTooLargeError``).

This module imports only the core: no HTTP client.
"""

from __future__ import annotations

import builtins
import json
import sys
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

from engrain import browse as browsing
from engrain import curate, validate, wire
from engrain import feedback as fb
from engrain.activity import ContextRecord
from engrain.engine import ImportResult
from engrain.errors import ValidationError
from engrain.feedback import FeedbackResult
from engrain.ingest.plan import Item, Origin
from engrain.model import IngestReport, Kind, Memory, MemoryType, Outcome, Turn, as_utc
from engrain.preview import Preview
from engrain.recall.gate import GateOptions
from engrain.recall.request import Request
from engrain.recall.results import Context, Gated, RecallResult
from engrain.review import FlaggedPair, Resolution, Resolved
from engrain.tiers import TierSet

T = TypeVar("T")

#: The server's largest page of ``GET /v1/memories``.
MAX_PAGE = 1000
NDJSON = "application/x-ndjson"

# The engine checks lengths against its own settings; here only the server knows them.
_NO_LIMIT = sys.maxsize
_DEFAULTS = GateOptions()


@dataclass(frozen=True)
class Req:
    """One HTTP request of a remote call: JSON in ``json``, or an NDJSON body of lines."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: dict[str, Any] | None = None
    lines: Iterable[bytes] | None = None


#: A remote call: yields requests, receives their decoded JSON answers, returns a result.
Op = Generator[Req, Any, T]


def jsonable(value: Any) -> Any:
    """``value`` in its JSON form: enums by value, times as ISO-8601 UTC, sequences as
    lists, mappings as objects (the forms the server's request models accept)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return as_utc(value).isoformat()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, builtins.list | tuple):
        return [jsonable(v) for v in value]
    return value


def _body(**fields: Any) -> dict[str, Any]:
    """A JSON body of the fields given (``None`` left out: the server's default)."""
    return {k: jsonable(v) for k, v in fields.items() if v is not None}


def _types(values: builtins.list[MemoryType] | None) -> builtins.list[str] | None:
    return None if values is None else [t.value for t in values]


def _memory_path(memory_id: str, suffix: str = "") -> str:
    return f"/v1/memories/{wire.path_segment(memory_id)}{suffix}"


# -- ingestion -------------------------------------------------------------------------------


def ingest(
    text: str,
    user_id: str,
    session_id: str | None = None,
    memory_type_hint: MemoryType | str | None = None,
    *,
    project: str | None = None,
    domains: Sequence[str] | str | None = None,
    event_at: datetime | None = None,
    metadata: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Op[IngestReport]:
    """Clean, chunk, embed, score, route and store free text on the server
    (``POST /v1/ingest``); the report says what happened to every chunk."""
    checked = validate.text(text, "text")
    o = Origin.checked(user_id, session_id, project, domains, memory_type_hint, metadata)
    body = _body(text=checked, user_id=o.user_id, session_id=o.session_id, project=o.project,
                 memory_type_hint=o.hint, domains=o.domains, metadata=o.metadata,
                 event_at=validate.moment(event_at, "event_at"),
                 now=validate.moment(now, "now"))  # fmt: skip
    return wire.load_ingest_report((yield Req("POST", "/v1/ingest", json=body)))


def ingest_conversation(
    turns: Sequence[Turn | Mapping[str, Any]],
    user_id: str,
    session_id: str | None = None,
    *,
    project: str | None = None,
    domains: Sequence[str] | str | None = None,
    memory_type_hint: MemoryType | str | None = None,
    metadata: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Op[IngestReport]:
    """Store a session's turns at once on the server (``POST /v1/conversations``). Each
    turn is ``Turn(speaker, text, turn_id, at)`` or a mapping with those keys."""
    parsed = validate.turns(turns)
    o = Origin.checked(user_id, session_id, project, domains, memory_type_hint, metadata)
    body = _body(turns=[_body(speaker=t.speaker, text=t.text, turn_id=t.turn_id, at=t.at)
                        for t in parsed],
                 user_id=o.user_id, session_id=o.session_id, project=o.project,
                 memory_type_hint=o.hint, domains=o.domains, metadata=o.metadata,
                 now=validate.moment(now, "now"))  # fmt: skip
    return wire.load_ingest_report((yield Req("POST", "/v1/conversations", json=body)))


def remember(
    content: str,
    user_id: str,
    kind: Kind | str = Kind.FACT,
    *,
    memory_type: MemoryType | str | None = None,
    project: str | None = None,
    domains: Sequence[str] | str | None = None,
    key: str | None = None,
    confidence: float | None = None,
    importance: float = 1.0,
    pinned: bool = False,
    muted: bool = False,
    access_count: int = 0,
    session_id: str | None = None,
    event_at: datetime | None = None,
    corrects: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    now: datetime | None = None,
) -> Op[Outcome]:
    """Store one typed item as given on the server (``POST /v1/memories``): the learning
    path of :meth:`Engine.remember <engrain.engine.Engine.remember>`, with the same
    near-duplicate, correction and conflict rules."""
    item = Item.checked(
        content, kind, max_chars=_NO_LIMIT, memory_type=memory_type, key=key,
        confidence=confidence, importance=importance, pinned=pinned, muted=muted,
        access_count=access_count, event_at=event_at, corrects=corrects,
    )  # fmt: skip
    o = Origin.checked(user_id, session_id, project, domains, None, metadata)
    body = _body(content=content, user_id=o.user_id, kind=item.kind,
                 memory_type=validate.optional_memory_type(memory_type), project=o.project,
                 domains=o.domains, key=key, confidence=confidence, importance=item.importance,
                 pinned=item.pinned, muted=item.muted, access_count=item.access_count,
                 session_id=o.session_id, event_at=item.event_at, corrects=item.corrects,
                 metadata=o.metadata, now=validate.moment(now, "now"))  # fmt: skip
    return wire.load_outcome((yield Req("POST", "/v1/memories", json=body)))


# -- reading ----------------------------------------------------------------------------------


def recall(
    query: str,
    user_id: str,
    top_k: int | None = None,
    token_budget: int | None = None,
    memory_types: Sequence[MemoryType | str] | None = None,
    *,
    project: str | None = None,
    include_compressed: bool = False,
    now: datetime | None = None,
) -> Op[RecallResult]:
    """The memories to inject for ``query`` (``POST /v1/recall``): the spec's recall, within
    ``token_budget`` and ``top_k`` (the server's settings when left out)."""
    body = _body(query=validate.text(query, "query"), user_id=validate.user_id(user_id),
                 top_k=validate.optional_integer(top_k, "top_k", minimum=1),
                 token_budget=validate.optional_integer(token_budget, "token_budget"),
                 memory_types=_types(validate.memory_types(memory_types)),
                 project=validate.optional_identifier(project, "project"),
                 include_compressed=validate.flag(include_compressed, "include_compressed"),
                 now=validate.moment(now, "now"))  # fmt: skip
    return wire.load_recall((yield Req("POST", "/v1/recall", json=body)))


def _gate_body(r: Request, now: datetime | None) -> dict[str, Any]:
    return _body(message=r.message, user_id=r.user_id, token_budget=r.token_budget,
                 memory_types=_types(r.memory_types), project=r.project,
                 include_compressed=r.include_compressed, turn=r.turn, previous=r.previous,
                 now=validate.moment(now, "now"))  # fmt: skip


def context(
    message: str,
    user_id: str,
    *,
    token_budget: int | None = None,
    top_k: int | None = None,
    memory_types: Sequence[MemoryType | str] | None = None,
    project: str | None = None,
    include_compressed: bool = False,
    turn: int = 0,
    model: str | None = None,
    context_window: int | None = None,
    now: datetime | None = None,
    previous: str | None = None,
) -> Op[Context]:
    """The memory block to inject for ``message`` (``POST /v1/context``): ``.text`` goes
    into the prompt, ``.id`` into :meth:`feedback`. The tier is picked as the engine picks
    it (``context_window``, else ``model``, else the server's settings). The gating options
    are the server's settings (there is no ``options`` argument over HTTP). ``previous``
    is the conversation's turn before ``message`` (see ``Engine.context``)."""
    r = Request.checked(message, user_id, token_budget, memory_types, project,
                        include_compressed, turn, None, now, defaults=_DEFAULTS,
                        max_chars=_NO_LIMIT, previous=previous)  # fmt: skip
    body = _gate_body(r, now)
    body.update(
        _body(
            top_k=validate.optional_integer(top_k, "top_k", minimum=1),
            model=validate.optional_identifier(model, "model"),
            context_window=validate.optional_integer(context_window, "context_window", minimum=1),
        )
    )
    return wire.load_context((yield Req("POST", "/v1/context", json=body)))


def explain(
    message: str,
    user_id: str,
    *,
    token_budget: int | None = None,
    memory_types: Sequence[MemoryType | str] | None = None,
    project: str | None = None,
    include_compressed: bool = False,
    turn: int = 0,
    now: datetime | None = None,
    previous: str | None = None,
) -> Op[Gated]:
    """What :meth:`context` would decide for ``message``, without counting an access
    (``POST /v1/explain``): classification, budget, weights, every candidate's score
    components and verdict. The gating options are the server's settings."""
    r = Request.checked(message, user_id, token_budget, memory_types, project,
                        include_compressed, turn, None, now, defaults=_DEFAULTS,
                        max_chars=_NO_LIMIT, previous=previous)  # fmt: skip
    return wire.load_gated((yield Req("POST", "/v1/explain", json=_gate_body(r, now))))


def feedback(
    user_id: str,
    context_id: str | None = None,
    memory_ids: Sequence[str] | None = None,
    *,
    helpful: bool | None = None,
    score: float | None = None,
) -> Op[FeedbackResult]:
    """Tell the server whether injected memory helped (``POST /v1/feedback``): for a
    context (its id, from :meth:`context`) or named memories, ``helpful=True/False`` or
    ``score`` in [0, 1]. An unknown or expired context id raises :class:`NotFoundError`."""
    user = validate.user_id(user_id)
    context_id = validate.optional_identifier(context_id, "context_id")
    ids = [] if memory_ids is None else validate.identifiers(memory_ids)
    fb.feedback_target(
        None if helpful is None else validate.flag(helpful, "helpful"),
        None if score is None else validate.unit(score, "score"),
    )
    if context_id is None and not ids:
        raise ValidationError("context_id: give a context_id or memory_ids")
    body = _body(user_id=user, context_id=context_id, memory_ids=ids or None, helpful=helpful,
                 score=score)  # fmt: skip
    return wire.load_feedback((yield Req("POST", "/v1/feedback", json=body)))


def tiers(user_id: str, project: str | None = None, *, rebuild: bool = False) -> Op[TierSet]:
    """Tiers 1 and 2 of the user's memories (``GET /v1/tiers``): the server's cached ones
    when fresh, else (or with ``rebuild``) compiled now. The server's clock dates them."""
    params = _body(user_id=validate.user_id(user_id),
                   project=validate.optional_identifier(project, "project"),
                   rebuild=validate.flag(rebuild, "rebuild"))  # fmt: skip
    return wire.load_tiers((yield Req("GET", "/v1/tiers", params=params)))


# -- curation -----------------------------------------------------------------------------


def get(memory_id: str, user_id: str) -> Op[Memory]:
    """The user's memory with this id (``GET /v1/memories/{id}``), or
    :class:`NotFoundError`. Memories come back without their embedding."""
    memory_id = validate.identifier(memory_id, "memory_id")
    params = {"user_id": validate.user_id(user_id)}
    return wire.load_memory((yield Req("GET", _memory_path(memory_id), params=params)))


def list(  # the Engine method's name
    user_id: str,
    *,
    project: str | None = None,
    memory_type: MemoryType | str | None = None,
    kind: Kind | str | None = None,
    session_id: str | None = None,
    include_compressed: bool = True,
    limit: int | None = 100,
    offset: int = 0,
) -> Op[builtins.list[Memory]]:
    """The user's memories, most recently updated first (``GET /v1/memories``), as one
    list like :meth:`Engine.list <engrain.engine.Engine.list>`: the client follows the
    server's cursor page by page (up to 1,000 a page) until it has ``offset + limit``
    memories (``limit=None``: all of them), then drops the first ``offset``. Memories
    written while it pages may shift a page by as many places."""
    params = _body(user_id=validate.user_id(user_id),
                   project=validate.optional_identifier(project, "project"),
                   memory_type=validate.optional_memory_type(memory_type),
                   kind=None if kind is None else validate.kind(kind),
                   session_id=validate.optional_identifier(session_id, "session_id"),
                   include_compressed=validate.flag(include_compressed,
                                                    "include_compressed"))  # fmt: skip
    limit = validate.optional_integer(limit, "limit")
    offset = validate.integer(offset, "offset")
    want = None if limit is None else offset + limit
    found: builtins.list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        size = MAX_PAGE if want is None else max(1, min(MAX_PAGE, want - len(found)))
        page_params = {**params, "limit": size, **({"cursor": cursor} if cursor else {})}
        page = yield Req("GET", "/v1/memories", params=page_params)
        found.extend(page["memories"])
        cursor = page.get("next_cursor")
        if cursor is None or (want is not None and len(found) >= want):
            break
    return [wire.load_memory(m) for m in found[offset:want]]


def update(
    memory_id: str, user_id: str, *, now: datetime | None = None, **changes: Any
) -> Op[Memory]:
    """Change fields of a memory (``PATCH /v1/memories/{id}``): content, kind, memory_type,
    domains, importance, confidence, usefulness, pinned, muted, event_at, key, project,
    metadata. Only the named fields are written; returns the memory as it now is."""
    memory_id = validate.identifier(memory_id, "memory_id")
    params = {"user_id": validate.user_id(user_id)}
    fields = curate.changes(changes, max_chars=_NO_LIMIT)
    body = {name: jsonable(fields[name] if name in ("domains", "metadata") else value)
            for name, value in changes.items()}  # fmt: skip
    body.update(_body(now=validate.moment(now, "now")))
    return wire.load_memory((yield Req("PATCH", _memory_path(memory_id), params, body)))


def _flag(
    memory_id: str, user_id: str, value: bool, which: str, action: str, now: datetime | None
) -> Req:
    memory_id = validate.identifier(memory_id, "memory_id")
    params = {"user_id": validate.user_id(user_id)}
    body = _body(value=validate.flag(value, which), now=validate.moment(now, "now"))
    return Req("POST", _memory_path(memory_id, f"/{action}"), params, body)


def pin(
    memory_id: str, user_id: str, pinned: bool = True, *, now: datetime | None = None
) -> Op[Memory]:
    """Pin (or unpin) a memory (``POST /v1/memories/{id}/pin``): pinned memories are
    injected whenever the budget allows. A flag, not an edit: the memory keeps its time."""
    return wire.load_memory((yield _flag(memory_id, user_id, pinned, "pinned", "pin", now)))


def mute(
    memory_id: str, user_id: str, muted: bool = True, *, now: datetime | None = None
) -> Op[Memory]:
    """Mute (or unmute) a memory (``POST /v1/memories/{id}/mute``): muted memories are
    never injected. A flag, not an edit: the memory keeps its time."""
    return wire.load_memory((yield _flag(memory_id, user_id, muted, "muted", "mute", now)))


def forget(memory_ids: str | Sequence[str], user_id: str) -> Op[int]:
    """Delete these memories of the user, atomically (``POST /v1/forget``); returns how
    many existed (an unknown id counts 0, as with the engine)."""
    body = {"memory_ids": validate.identifiers(memory_ids), "user_id": validate.user_id(user_id)}
    answer = yield Req("POST", "/v1/forget", json=body)
    return int(answer["forgotten"])


# -- the inspector's reads and curation -------------------------------------------------------


def browse(
    user_id: str,
    *,
    text: str | None = None,
    memory_types: Sequence[MemoryType | str] | None = None,
    kinds: Sequence[Kind | str] | None = None,
    domain: str | None = None,
    project: str | None = None,
    pinned: bool | None = None,
    muted: bool | None = None,
    superseded: bool | None = None,
    conflicting: bool | None = None,
    sort: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    projects: Sequence[str] | None = None,
) -> Op[browsing.Page]:
    """A page of the user's memories for people to look through (``POST /v1/browse``):
    ``text`` searches (best first), the filters narrow (``None`` is any), ``sort`` orders;
    ``cursor`` is the previous page's ``next_cursor``. A project-limited key sees only its
    projects' memories. Reads only."""
    user = validate.user_id(user_id)
    b = browsing.Browse.checked(
        text=text, memory_types=memory_types, kinds=kinds, domain=domain, project=project,
        pinned=pinned, muted=muted, superseded=superseded, conflicting=conflicting,
        sort=sort, limit=limit, cursor=cursor, projects=projects, max_chars=_NO_LIMIT,
    )  # fmt: skip
    if b.cursor is not None:  # a cursor of another order: the engine's error, before sending
        browsing.decode_cursor(b.cursor, b.order)
    body = _body(user_id=user, text=b.text, memory_types=b.memory_types, kinds=b.kinds,
                 domain=b.domain, project=b.project, pinned=b.pinned, muted=b.muted,
                 superseded=b.superseded, conflicting=b.conflicting, sort=b.sort,
                 limit=b.limit, cursor=b.cursor, projects=b.projects)  # fmt: skip
    return wire.load_page((yield Req("POST", "/v1/browse", json=body)))


def relations(memory_id: str, user_id: str) -> Op[browsing.Relations]:
    """The memory's conflicts, the memories it corrected and the one correcting it
    (``GET /v1/memories/{id}/relations``); :class:`NotFoundError` for an unknown id."""
    memory_id = validate.identifier(memory_id, "memory_id")
    params = {"user_id": validate.user_id(user_id)}
    path = _memory_path(memory_id, "/relations")
    return wire.load_relations((yield Req("GET", path, params=params)))


def review(
    user_id: str, *, project: str | None = None, limit: int | None = 50
) -> Op[builtins.list[FlaggedPair]]:
    """The review queue (``GET /v1/review``): pairs of the user's active memories flagged
    as conflicting, newest first, then near-duplicates, closest first; at most ``limit``
    pairs (``None``: every one). Reads only."""
    limit = validate.optional_integer(limit, "limit", minimum=1)
    params = _body(user_id=validate.user_id(user_id),
                   project=validate.optional_identifier(project, "project"),
                   limit=validate.MAX_INT if limit is None else limit)  # fmt: skip
    answer = yield Req("GET", "/v1/review", params=params)
    return [wire.load_flagged_pair(p) for p in answer["pairs"]]


def resolve(
    memory_id: str,
    other_id: str,
    user_id: str,
    resolution: Resolution | str,
    *,
    now: datetime | None = None,
) -> Op[Resolved]:
    """Resolve a reviewed pair in one transaction (``POST /v1/review/resolve``): ``keep``
    the first and forget the other, the first ``correct``s (supersedes) the other, or keep
    ``both``; :class:`NotFoundError` if either memory is not the user's."""
    body = _body(memory_id=validate.identifier(memory_id, "memory_id"),
                 other_id=validate.identifier(other_id, "other_id"),
                 user_id=validate.user_id(user_id), resolution=Resolution.parse(resolution),
                 now=validate.moment(now, "now"))  # fmt: skip
    return wire.load_resolved((yield Req("POST", "/v1/review/resolve", json=body)))


def contexts(
    user_id: str, *, project: str | None = None, limit: int = 20
) -> Op[builtins.list[ContextRecord]]:
    """The user's most recent recorded contexts, newest first (``GET /v1/contexts``): when,
    the memories injected (those still stored) and the feedback given. Reads only."""
    limit = validate.integer(limit, "limit", minimum=1)
    params = _body(user_id=validate.user_id(user_id),
                   project=validate.optional_identifier(project, "project"),
                   limit=limit)  # fmt: skip
    answer = yield Req("GET", "/v1/contexts", params=params)
    return [wire.load_context_record(c) for c in answer["contexts"]]


def preview(
    message: str,
    user_id: str,
    *,
    token_budget: int | None = None,
    project: str | None = None,
    model: str | None = None,
    context_window: int | None = None,
    turn: int = 0,
    now: datetime | None = None,
    previous: str | None = None,
) -> Op[Preview]:
    """What :meth:`context` would return for ``message`` (``POST /v1/preview``): the tier,
    the exact block, the memories it holds, and the gating pipeline's explanation. The
    server writes nothing: no use counted, no context recorded, no tier compiled."""
    r = Request.checked(message, user_id, token_budget, None, project, False, turn, None, now,
                        defaults=_DEFAULTS, max_chars=_NO_LIMIT, previous=previous)  # fmt: skip
    body = _body(message=r.message, user_id=r.user_id, token_budget=r.token_budget,
                 project=r.project, model=validate.optional_identifier(model, "model"),
                 context_window=validate.optional_integer(context_window, "context_window",
                                                          minimum=1),
                 turn=r.turn, previous=r.previous, now=validate.moment(now, "now"))  # fmt: skip
    return wire.load_preview((yield Req("POST", "/v1/preview", json=body)))


def users() -> Op[builtins.list[str]]:
    """The users with memories (``GET /v1/users``) that the key holds; with an admin key,
    every user of the server's store."""
    answer = yield Req("GET", "/v1/users")
    return [str(u) for u in answer["users"]]


# -- import / export ------------------------------------------------------------------------


def export_request(user_id: str | None = None) -> Req:
    """The request of an export: one user, or (``None``) every user the key holds (an
    admin key: every user of the server's store)."""
    params = {} if user_id is None else {"user_id": validate.user_id(user_id)}
    return Req("GET", "/v1/export", params=params)


def record_of(line: bytes | str) -> dict[str, Any]:
    """One exported NDJSON line as a record."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("an export line is not a JSON object")
    return record


def ndjson(
    records: Iterable[Mapping[str, Any]], on_sent: Callable[[int], None] | None = None
) -> Iterator[bytes]:
    """``records`` as NDJSON lines, encoded as they are read (an import streams); a record
    that is not a JSON object raises :class:`ValidationError` as the engine's import does,
    and ends the upload before the server writes anything."""
    for number, record in enumerate(records, 1):
        if not isinstance(record, Mapping):
            raise ValidationError(f"record {number}: must be a JSON object, "
                                  f"not {type(record).__name__}")  # fmt: skip
        try:
            line = json.dumps(jsonable(record), ensure_ascii=False, allow_nan=False,
                              default=_tolist)  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"record {number}: not JSON: {exc}") from exc
        yield line.encode("utf-8") + b"\n"
        if on_sent is not None:
            on_sent(number)


def _tolist(value: Any) -> Any:
    """Vectors (numpy arrays) as lists; anything else is not JSON."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def import_records(
    records: Iterable[Mapping[str, Any]],
    *,
    on_record: Callable[[int], None] | None = None,
) -> Op[ImportResult]:
    """Load records on the server (``POST /v1/import``, NDJSON streamed as it is encoded):
    exported memories, state documents, conversations, texts and hand-written memories;
    every record must be of a user the key holds. All or nothing, as with the engine.
    ``on_record`` is called with each record's number once it is sent (upload progress);
    the server's clock dates the records that carry no time of their own."""
    if on_record is not None and not callable(on_record):
        raise ValidationError("on_record must be callable")
    if isinstance(records, str | bytes | Mapping) or not isinstance(records, Iterable):
        raise ValidationError("records must be an iterable of records")
    answer = yield Req("POST", "/v1/import", lines=ndjson(records, on_record))
    return wire.load_import(answer)
