"""The pydantic models of the HTTP API: what every route accepts and returns.

The same models validate requests and generate the OpenAPI 3.1 document
(``/openapi.json``), so the document cannot drift from the server. Request models state
what the engine accepts (``engrain/validate.py``): ids and texts with the characters it
takes, numbers within its ranges, kinds and memory types as enums, times as ISO-8601
strings; a request outside them is 422 before the engine runs. The engine's validation
stays the authority: whatever it still refuses is 400 with its own code. Response models
mirror :mod:`engrain.wire`.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    WithJsonSchema,
    model_validator,
)

from engrain.tiers.registry import MODEL_WINDOWS
from engrain.validate import MAX_ID_CHARS, MAX_INT

USER_ID = (
    "The user whose memory this is. May be left out when the API key holds exactly one "
    "user; a key may only name users it holds (else 403)."
)


def _classes() -> dict[str, str]:
    """Regex character-class bodies of the code points in planes 0, 1 and 14 (where every
    control, format and space character lives), from this Python's ``unicodedata`` (the
    tables the engine checks with): ``control`` (categories Cc and Cf), ``space`` (what
    ``str.isspace`` and ``str.strip`` see) and ``invisible`` (both, and Zs)."""
    spans: dict[str, list[list[int]]] = {"control": [], "space": [], "invisible": []}
    for code in (*range(0x20000), *range(0xE0000, 0xE1000)):
        char = chr(code)
        category = unicodedata.category(char)
        control = category in ("Cc", "Cf")
        space = char.isspace()
        for name, member in (("control", control), ("space", space),
                             ("invisible", control or space or category == "Zs")):  # fmt: skip
            if not member:
                continue
            found = spans[name]
            if found and found[-1][1] == code - 1:
                found[-1][1] = code
            else:
                found.append([code, code])
    return {name: "".join(_escape(a) if a == b else f"{_escape(a)}-{_escape(b)}"
                          for a, b in found) for name, found in spans.items()}  # fmt: skip


def _escape(code: int) -> str:
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


_CLASSES = _classes()
_CONTROL, _SPACE, _INVISIBLE = _CLASSES["control"], _CLASSES["space"], _CLASSES["invisible"]

#: An id (user, project, session, memory, key): no control or format character, at least
#: one character that is not a space (``validate.identifier``).
ID_PATTERN = f"^[^{_CONTROL}]*[^{_CONTROL}{_SPACE}][^{_CONTROL}]*$"
#: Text (content, a message, a query): at least one visible character; control characters
#: are allowed (the engine drops them), so the pattern only looks for one visible.
TEXT_PATTERN = f"[^{_INVISIBLE}]"
#: A domain tag: control and format characters only among the spaces around it (which
#: the engine strips); an empty tag is ignored.
TAG_PATTERN = f"^[{_SPACE}]*[^{_CONTROL}]*[{_SPACE}]*$"

#: Years a time may fall in: the engine adds and subtracts retention periods to times, and
#: a date near year 1 or 9999 would leave the calendar.
FIRST_YEAR, LAST_YEAR = 1000, 8999


def _text_time(value: Any) -> Any:
    """JSON times are strings: a number is not taken for a Unix time."""
    if not isinstance(value, str | datetime):
        raise ValueError("a time must be an ISO-8601 string")
    return value


def _in_range(value: datetime) -> datetime:
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        raise ValueError(f"the year must be between {FIRST_YEAR} and {LAST_YEAR}")
    return value


def _composed_length(value: Any) -> Any:
    """An id's length counted as the engine counts it, once composed (NFC): a decomposed
    id that is :data:`MAX_ID_CHARS` characters once composed is one the API, CLI and MCP
    accept, so HTTP accepts it too (session 17, h8). The pattern still reads the id as
    sent; the engine composes it."""
    if isinstance(value, str) and len(unicodedata.normalize("NFC", value)) > MAX_ID_CHARS:
        raise ValueError(f"String should have at most {MAX_ID_CHARS} characters")
    return value


#: Put beside ``Query(**ID_RULES)`` (or ``Path``, ``Form``): the length rule, composed.
COMPOSED = AfterValidator(_composed_length)
#: The constraints of an id, for a query or path parameter (``Query(**ID_RULES)``); the
#: length is documented here and checked by :data:`COMPOSED`.
ID_RULES: dict[str, Any] = {
    "min_length": 1, "pattern": ID_PATTERN, "json_schema_extra": {"maxLength": MAX_ID_CHARS}
}  # fmt: skip
Id = Annotated[str, Field(**ID_RULES), COMPOSED]
Text = Annotated[str, Field(min_length=1, pattern=TEXT_PATTERN)]
Tag = Annotated[str, Field(pattern=TAG_PATTERN, max_length=MAX_ID_CHARS)]
Unit = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]


def _json_number(value: Any) -> Any:
    """A body's integers are JSON numbers (``5``, or ``5.0``, which JSON Schema counts as
    an integer): not ``"5"`` or ``true``."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON number")
    return value


Number = BeforeValidator(_json_number)
Budget = Annotated[int, Field(ge=0, le=MAX_INT), Number]
Positive = Annotated[int, Field(ge=1, le=MAX_INT), Number]
#: The largest usage count taken over HTTP: every JSON reader holds it exactly (the engine
#: takes up to 2**62).
MAX_USES = 2**53 - 1
#: A JSON boolean only: ``"false"`` or ``0`` are not taken for one.
Flag = StrictBool
#: A model the engine knows (the registry, ``engrain/tiers/registry.py``): a registered
#: name, or one followed by a version suffix (``gpt-4o-2024-08-06``).
_MODELS = "|".join(name.replace(".", "\\.") for name in sorted(MODEL_WINDOWS))
MODEL_PATTERN = f"^(?:{_MODELS})(?:-[a-z0-9.]+)*$"
#: What each pattern above asks, in the words the engine's own refusal uses: a 422 names
#: this, not the pattern (``server/errors.py``), which is hundreds of escaped code points.
PATTERN_MEANINGS = {
    ID_PATTERN: "is empty or contains control or invisible characters",
    TEXT_PATTERN: "is empty (no visible characters)",
    TAG_PATTERN: "contains control or invisible characters",
    MODEL_PATTERN: "is not a model engrain knows (engrain.tiers.MODEL_WINDOWS); "
    "leave it out and give context_window",
}
Moment = Annotated[
    datetime,
    BeforeValidator(_text_time),
    AfterValidator(_in_range),
    WithJsonSchema({"type": "string", "format": "date-time",
                    "pattern": f"^[{FIRST_YEAR // 1000}-{LAST_YEAR // 1000}][0-9]{{3}}-"}),
]  # fmt: skip
Kind = Literal["invariant", "pattern", "decision", "antipattern", "golden_path", "preference",
               "fact", "context", "correction", "summary", "event"]  # fmt: skip
MemoryType = Literal["episodic", "semantic", "procedural", "working"]
Metadata = dict[str, Any]


def _absent(schema: dict[str, Any]) -> None:
    """The schema of an :func:`optional` field: its type without null, and no default."""
    schema.pop("default", None)
    branches = schema.pop("anyOf", None)
    if branches is not None:
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) == 1:
            schema.update(kept[0])
        else:
            schema["anyOf"] = kept


def optional(**kw: Any) -> Any:
    """A field that may be left out but, when present, may not be null (the engine has no
    meaning for null there): ``None`` in Python stands for "left out"; the schema shows
    the type without null and without a default."""
    return Field(None, json_schema_extra=_absent, **kw)


class Strict(BaseModel):
    """A request body: unknown fields are refused, so a typo is an error, not a no-op; an
    :func:`optional` field given as null is refused too."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _no_null(self) -> Self:
        for name in self.model_fields_set:
            field = type(self).model_fields[name]
            if field.json_schema_extra is _absent and getattr(self, name) is None:
                raise ValueError(f"{name} may be left out but not null")
        return self


# -- requests -----------------------------------------------------------------------------


class RememberRequest(Strict):
    """``Engine.remember``: store one typed item as given."""

    content: Text = Field(description="The memory's text.")
    user_id: Id | None = Field(None, description=USER_ID)
    kind: Kind = "fact"
    memory_type: MemoryType | None = Field(None, description="Default: by kind.")
    project: Id | None = None
    domains: list[Tag] | None = None
    key: Id | None = Field(None, description="Key of a procedural memory (replaces).")
    confidence: Unit | None = Field(None, description="Default: by kind.")
    importance: Unit = 1.0
    pinned: Flag = False
    muted: Flag = False
    access_count: Annotated[int, Field(ge=0, le=MAX_USES), Number] = 0
    session_id: Id | None = None
    event_at: Moment | None = None
    corrects: Id | None = Field(None, description="Id of a memory this one supersedes.")
    metadata: Metadata | None = None
    now: Moment | None = Field(None, description="The time of the call (default: now).")


class IngestRequest(Strict):
    """``Engine.ingest``: clean, chunk, score, route and store free text."""

    text: Text
    user_id: Id | None = Field(None, description=USER_ID)
    session_id: Id | None = None
    memory_type_hint: MemoryType | None = None
    project: Id | None = None
    domains: list[Tag] | None = None
    event_at: Moment | None = None
    metadata: Metadata | None = None
    now: Moment | None = None


class TurnIn(Strict):
    """One turn of a conversation."""

    speaker: str
    text: Text
    turn_id: Id | None = None
    at: Moment | None = None


class ConversationRequest(Strict):
    """``Engine.ingest_conversation``: a session's turns at once."""

    turns: list[TurnIn] = Field(min_length=1)
    user_id: Id | None = Field(None, description=USER_ID)
    session_id: Id | None = None
    project: Id | None = None
    domains: list[Tag] | None = None
    memory_type_hint: MemoryType | None = None
    metadata: Metadata | None = None
    now: Moment | None = None


PREVIOUS = (
    "The conversation's turn before `message`, as the caller has it: a "
    'continuation ("and the refresh ones?") is searched with it too; a '
    "self-contained message is answered as without it."
)


class ContextRequest(Strict):
    """``Engine.context``: the memory block to inject for a message."""

    message: Text
    user_id: Id | None = Field(None, description=USER_ID)
    token_budget: Budget | None = Field(None, description="A fixed budget (and the gated tier).")
    top_k: Positive | None = None
    memory_types: list[MemoryType] | None = None
    project: Id | None = None
    include_compressed: Flag = False
    turn: Budget = 0
    previous: Text | None = Field(None, description=PREVIOUS)
    model: Annotated[str, Field(pattern=MODEL_PATTERN)] | None = Field(
        None, description="The target model (picks the tier): a model the server knows."
    )
    context_window: Positive | None = Field(None, description="The target's window in tokens.")
    now: Moment | None = None


class RecallRequest(Strict):
    """``Engine.recall``: the spec's recall (nearest candidates, filtered, within budget)."""

    query: Text
    user_id: Id | None = Field(None, description=USER_ID)
    top_k: Positive | None = None
    token_budget: Budget | None = None
    memory_types: list[MemoryType] | None = None
    project: Id | None = None
    include_compressed: Flag = False
    now: Moment | None = None


class ExplainRequest(Strict):
    """``Engine.explain``: what ``context`` would decide, without counting an access."""

    message: Text
    user_id: Id | None = Field(None, description=USER_ID)
    token_budget: Budget | None = None
    memory_types: list[MemoryType] | None = None
    project: Id | None = None
    include_compressed: Flag = False
    turn: Budget = 0
    previous: Text | None = Field(None, description=PREVIOUS)
    now: Moment | None = None


def _given(name: str, json_type: str) -> dict[str, Any]:
    """A JSON schema clause: ``name`` is present and not null."""
    return {"required": [name], "properties": {name: {"type": json_type}}}


class FeedbackRequest(Strict):
    """``Engine.feedback``: whether injected memory helped: exactly one of ``helpful`` or
    ``score``, for a ``context_id``, named ``memory_ids``, or both."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [
        {"oneOf": [_given("helpful", "boolean"), _given("score", "number")]},
        {"anyOf": [_given("context_id", "string"), _given("memory_ids", "array")]},
    ]})  # fmt: skip

    user_id: Id | None = Field(None, description=USER_ID)
    context_id: Id | None = Field(None, description="The `context_id` of `POST /v1/context`.")
    memory_ids: list[Id] | None = Field(None, min_length=1)
    helpful: Flag | None = None
    score: Unit | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.helpful is None) == (self.score is None):
            raise ValueError("give exactly one of helpful (true/false) or score (0..1)")
        if self.context_id is None and self.memory_ids is None:
            raise ValueError("give a context_id or memory_ids")
        return self


class ForgetRequest(Strict):
    """``Engine.forget`` of several memories at once (atomically)."""

    memory_ids: list[Id] = Field(min_length=1)
    user_id: Id | None = Field(None, description=USER_ID)


class UpdateRequest(Strict):
    """``Engine.update``: only the fields present are changed (``key``, ``project`` and
    ``event_at`` may be set to null to clear them)."""

    content: Text | None = optional()
    kind: Kind | None = optional()
    memory_type: MemoryType | None = optional()
    domains: list[Tag] | None = optional()
    importance: Unit | None = optional()
    confidence: Unit | None = optional()
    usefulness: Unit | None = optional()
    pinned: Flag | None = optional()
    muted: Flag | None = optional()
    event_at: Moment | None = None
    key: Id | None = None
    project: Id | None = None
    metadata: Metadata | None = optional()
    now: Moment | None = optional()


class FlagRequest(Strict):
    """Pin or mute (``value: true``), unpin or unmute (``value: false``)."""

    value: Flag = True
    now: Moment | None = None


# -- responses ------------------------------------------------------------------------------


class ProvenanceOut(BaseModel):
    """Where a memory came from."""

    turn_ids: list[str]
    metadata: dict[str, Any]


class MemoryOut(BaseModel):
    """One memory (every field but its embedding)."""

    id: str
    user_id: str
    project: str | None
    content: str
    memory_type: str
    kind: str
    domains: list[str]
    session_id: str | None
    created_at: str
    updated_at: str
    event_at: str | None
    key: str | None
    importance: float
    confidence: float
    usefulness: float
    access_count: int
    last_accessed_at: str | None
    pinned: bool
    muted: bool
    promoted_at: str | None
    compressed: bool
    compression_source: bool
    source_session_id: str | None
    superseded_by: str | None
    provenance: ProvenanceOut
    content_hash: str


class OutcomeOut(BaseModel):
    """What happened to one piece of input."""

    action: Literal["stored", "merged", "discarded"]
    memory_id: str | None
    reason: str | None
    importance: float | None
    memory_type: str | None
    turn_ids: list[str]
    content: str


class IngestReportOut(BaseModel):
    """The outcome of every chunk of one ingest call, in input order."""

    outcomes: list[OutcomeOut]
    stored: list[str]
    merged: list[str]


class ScoredOut(BaseModel):
    """A memory with the score recall ranked it by."""

    memory: MemoryOut
    score: float
    similarity: float
    tokens: int


class RecallOut(BaseModel):
    """The spec's RecallResult."""

    memories: list[MemoryOut]
    total_tokens: int
    budget_used: float
    scored: list[ScoredOut]


class ClassificationOut(BaseModel):
    """The classifier's verdict on a message."""

    complexity: str
    intent: str
    domains: list[str]
    turn: int
    has_code: bool
    references_history: bool
    signals: list[str]


class BudgetOut(BaseModel):
    """The token budget and the steps that derived it."""

    tokens: int
    steps: list[str]


class DecisionOut(BaseModel):
    """Why a candidate was or was not injected."""

    item: ScoredOut
    selected: bool
    reason: str


class GatedOut(BaseModel):
    """Everything the relevance-gating pipeline decided for one message."""

    classification: ClassificationOut
    budget: BudgetOut
    weights: dict[str, float]
    selected: list[ScoredOut]
    tokens_used: int
    text: str
    decisions: list[DecisionOut]
    ranked: list[ScoredOut]
    components: dict[str, dict[str, float]]
    timings_ms: dict[str, float]


class ScoredRef(BaseModel):
    """A memory of the context (``memories`` or ``other_memories``), named by id, with the
    score it was ranked by."""

    memory_id: str
    score: float
    similarity: float
    tokens: int


class RecallRefs(BaseModel):
    """The context's recall result, its memories named by id."""

    memory_ids: list[str]
    total_tokens: int
    budget_used: float
    scored: list[ScoredRef]


class DecisionRef(BaseModel):
    """Why a candidate was or was not injected, the candidate named by id."""

    item: ScoredRef
    selected: bool
    reason: str


class GatedRefs(BaseModel):
    """The gating decisions behind a context, memories named by id (the block text is the
    context's ``text``)."""

    classification: ClassificationOut
    budget: BudgetOut
    weights: dict[str, float]
    selected: list[ScoredRef]
    tokens_used: int
    decisions: list[DecisionRef]
    ranked: list[ScoredRef]
    components: dict[str, dict[str, float]]
    timings_ms: dict[str, float]


class ContextOut(BaseModel):
    """The memory block for a message: ``text`` goes into the prompt, ``context_id`` into
    ``POST /v1/feedback``. Each memory is written once, in ``memories`` (the injected ones)
    or ``other_memories``; ``recall`` and ``gated`` name them by id."""

    context_id: str
    text: str
    tokens: int
    budget: int | None = Field(description="The gate's token budget; null when a compiled "
                                            "tier answered.")  # fmt: skip
    tier: int
    fallback: bool
    elapsed_ms: float
    memories: list[MemoryOut]
    other_memories: list[MemoryOut]
    recall: RecallRefs
    gated: GatedRefs | None


class UsefulnessChange(BaseModel):
    """A memory's usefulness before and after one feedback."""

    before: float
    after: float


class FeedbackOut(BaseModel):
    """What one feedback changed."""

    target: float
    usefulness: dict[str, UsefulnessChange]
    pairs_learned: int


class CompiledTierOut(BaseModel):
    """One compiled tier."""

    tier: int
    text: str
    tokens: int
    memory_ids: list[str]
    compiled_by: str


class TiersOut(BaseModel):
    """Tiers 1 (DNA summary) and 2 (field guide) of a user and project."""

    user_id: str
    project: str | None
    revision: int
    compiled_at: str
    tiers: dict[str, CompiledTierOut]
    stats: dict[str, int]
    memories: list[MemoryOut]


class ImportOut(BaseModel):
    """What an import did."""

    memories: int
    stored: int
    merged: int
    discarded: int
    states: int


class ForgottenOut(BaseModel):
    """How many of the named memories existed (and are now gone)."""

    forgotten: int


class MemoryPage(BaseModel):
    """One page of memories, most recently updated first; pass ``next_cursor`` as
    ``cursor`` for the next page (null: this was the last)."""

    memories: list[MemoryOut]
    next_cursor: str | None


class ErrorOut(BaseModel):
    """Every error: a stable ``error`` code from engrain's error tree, a message for
    people, the HTTP status and the request id (also in the ``X-Request-ID`` header)."""

    error: str
    message: str
    status: int
    request_id: str


class StatusOut(BaseModel):
    """Liveness or readiness."""

    status: Literal["ok"]


# -- the inspector's reads and curation (routes_inspect.py) ---------------------------------

#: The orders of ``POST /v1/browse`` (``engrain.browse.Sort``).
BrowseSort = Literal["updated", "used", "importance", "relevance"]
#: How a reviewed pair is resolved (``engrain.review.Resolution``).
ResolutionName = Literal["keep", "correct", "both"]
#: A search: blank (no search), or text with at least one visible character.
SEARCH_PATTERN = f"^[{_SPACE}]*$|[^{_INVISIBLE}]"


class BrowseRequest(Strict):
    """``Engine.browse``: a page of the user's memories for people to look through. Every
    filter left out is "any"; ``true``/``false`` mean only those / none of those."""

    user_id: Id | None = Field(default=None, description=USER_ID)
    text: Annotated[str, Field(pattern=SEARCH_PATTERN)] | None = Field(
        default=None, description="A search (BM25, best first); blank: no search."
    )
    memory_types: list[MemoryType] | None = None
    kinds: list[Kind] | None = None
    domain: Tag | None = Field(default=None, description="One domain tag.")
    project: Id | None = None
    pinned: Flag | None = None
    muted: Flag | None = None
    superseded: Flag | None = None
    conflicting: Flag | None = None
    sort: BrowseSort | None = Field(
        default=None, description="Default: relevance with a search, else updated."
    )
    limit: Positive | None = Field(default=None, description="Default 50; at most 200 a page.")
    cursor: Id | None = Field(
        default=None,
        description="`next_cursor` of the previous page (the same search, filters and sort).",
    )
    projects: list[Id] | None = Field(
        default=None,
        min_length=1,
        description="Only these projects (a project-limited key: some of its own).",
    )


class ResolveRequest(Strict):
    """``Engine.resolve``: resolve a reviewed pair in one transaction."""

    memory_id: Id = Field(description="The first memory of the pair (the one kept or "
                          "correcting).")  # fmt: skip
    other_id: Id = Field(description="The second memory of the pair.")
    user_id: Id | None = Field(None, description=USER_ID)
    resolution: ResolutionName = Field(
        description="`keep` the first and forget the other, "
        "the first `correct`s the other, or keep `both`."
    )
    now: Moment | None = None


class PreviewRequest(Strict):
    """``Engine.preview``: what ``context`` would return for a message, without writing."""

    message: Text
    user_id: Id | None = Field(None, description=USER_ID)
    token_budget: Budget | None = Field(None, description="A fixed budget (and the gated tier).")
    project: Id | None = None
    model: Annotated[str, Field(pattern=MODEL_PATTERN)] | None = Field(
        None, description="The target model (picks the tier): a model the server knows."
    )
    context_window: Positive | None = Field(None, description="The target's window in tokens.")
    turn: Budget = 0
    previous: Text | None = Field(None, description=PREVIOUS)
    now: Moment | None = None


class PageOut(BaseModel):
    """One page of ``POST /v1/browse``: the memories in order, how many match in all, the
    order in effect, and the cursor of the next page (null: the last)."""

    memories: list[MemoryOut]
    total: int
    next_cursor: str | None
    sort: BrowseSort


class RelationsOut(BaseModel):
    """How one memory stands to the others."""

    conflicts: list[MemoryOut]
    corrects: list[MemoryOut]
    corrected_by: MemoryOut | None


class FlaggedPairOut(BaseModel):
    """Two memories to review: why they were queued, the disagreement found (conflicts) and
    their cosine similarity."""

    first: MemoryOut
    second: MemoryOut
    reason: Literal["conflict", "duplicate"]
    detail: str | None
    similarity: float


class ReviewOut(BaseModel):
    """The review queue: conflicts newest first, then duplicates closest first."""

    pairs: list[FlaggedPairOut]


class ResolvedOut(BaseModel):
    """What a resolution did: the memories kept, forgotten and superseded."""

    resolution: ResolutionName
    kept: list[str]
    forgotten: list[str]
    superseded: list[str]


class ContextRecordOut(BaseModel):
    """One recorded context: when, the ids it injected, those memories still stored, and
    every feedback target given on it."""

    context_id: str
    at: str
    memory_ids: list[str]
    memories: list[MemoryOut]
    feedback: list[float]


class ContextsOut(BaseModel):
    """The user's most recent recorded contexts, newest first."""

    contexts: list[ContextRecordOut]


class PreviewOut(BaseModel):
    """What ``POST /v1/context`` would return for the message, with the gating pipeline's
    explanation; nothing was written."""

    tier: int
    fallback: bool
    text: str
    tokens: int
    budget: int
    memories: list[MemoryOut]
    gated: GatedOut


class UsersOut(BaseModel):
    """The users with memories that the key holds (an admin key: every one)."""

    users: list[str]
