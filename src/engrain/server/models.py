"""The pydantic models of the HTTP API: what every route accepts and returns.

The same models validate requests and generate the OpenAPI 3.1 document
(``/openapi.json``), so the document cannot drift from the server. Request models check
shapes only (types, required fields, ranges the HTTP layer owns such as page sizes); the
engine's own validation (``engrain/validate.py``) stays the authority on values, so a kind
or memory type is a string here and an unknown one is refused by the engine (400
``unknown_value``), exactly as from Python. Response models mirror :mod:`engrain.wire`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

USER_ID = (
    "The user whose memory this is. May be left out when the API key holds exactly one "
    "user; a key may only name users it holds (else 403)."
)
KINDS = ("invariant, pattern, decision, antipattern, golden_path, preference, fact, "
         "context, correction, summary, event")  # fmt: skip
TYPES = "episodic, semantic, procedural, working"


class Strict(BaseModel):
    """A request body: unknown fields are refused, so a typo is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid")


# -- requests -----------------------------------------------------------------------------


class RememberRequest(Strict):
    """``Engine.remember``: store one typed item as given."""

    content: str = Field(description="The memory's text.")
    user_id: str | None = Field(None, description=USER_ID)
    kind: str = Field("fact", description=f"One of: {KINDS}.")
    memory_type: str | None = Field(None, description=f"One of: {TYPES}; default by kind.")
    project: str | None = None
    domains: list[str] | None = None
    key: str | None = Field(None, description="Key of a procedural memory (replaces).")
    confidence: float | None = None
    importance: float = 1.0
    pinned: bool = False
    muted: bool = False
    access_count: int = 0
    session_id: str | None = None
    event_at: datetime | None = None
    corrects: str | None = Field(None, description="Id of a memory this one supersedes.")
    metadata: dict[str, Any] | None = None
    now: datetime | None = Field(None, description="The time of the call (default: now).")


class IngestRequest(Strict):
    """``Engine.ingest``: clean, chunk, score, route and store free text."""

    text: str
    user_id: str | None = Field(None, description=USER_ID)
    session_id: str | None = None
    memory_type_hint: str | None = Field(None, description=f"One of: {TYPES}.")
    project: str | None = None
    domains: list[str] | None = None
    event_at: datetime | None = None
    metadata: dict[str, Any] | None = None
    now: datetime | None = None


class TurnIn(Strict):
    """One turn of a conversation."""

    speaker: str
    text: str
    turn_id: str | None = None
    at: datetime | None = None


class ConversationRequest(Strict):
    """``Engine.ingest_conversation``: a session's turns at once."""

    turns: list[TurnIn]
    user_id: str | None = Field(None, description=USER_ID)
    session_id: str | None = None
    project: str | None = None
    domains: list[str] | None = None
    memory_type_hint: str | None = Field(None, description=f"One of: {TYPES}.")
    metadata: dict[str, Any] | None = None
    now: datetime | None = None


class ContextRequest(Strict):
    """``Engine.context``: the memory block to inject for a message."""

    message: str
    user_id: str | None = Field(None, description=USER_ID)
    token_budget: int | None = None
    top_k: int | None = None
    memory_types: list[str] | None = None
    project: str | None = None
    include_compressed: bool = False
    turn: int = 0
    model: str | None = Field(None, description="The target model (picks the tier).")
    context_window: int | None = Field(None, description="The target's window in tokens.")
    now: datetime | None = None


class RecallRequest(Strict):
    """``Engine.recall``: the spec's recall (nearest candidates, filtered, within budget)."""

    query: str
    user_id: str | None = Field(None, description=USER_ID)
    top_k: int | None = None
    token_budget: int | None = None
    memory_types: list[str] | None = None
    project: str | None = None
    include_compressed: bool = False
    now: datetime | None = None


class ExplainRequest(Strict):
    """``Engine.explain``: what ``context`` would decide, without counting an access."""

    message: str
    user_id: str | None = Field(None, description=USER_ID)
    token_budget: int | None = None
    memory_types: list[str] | None = None
    project: str | None = None
    include_compressed: bool = False
    turn: int = 0
    now: datetime | None = None


class FeedbackRequest(Strict):
    """``Engine.feedback``: whether injected memory helped (exactly one of ``helpful`` or
    ``score``; a ``context_id`` or ``memory_ids``)."""

    user_id: str | None = Field(None, description=USER_ID)
    context_id: str | None = None
    memory_ids: list[str] | None = None
    helpful: bool | None = None
    score: float | None = None


class ForgetRequest(Strict):
    """``Engine.forget`` of several memories at once (atomically)."""

    memory_ids: list[str]
    user_id: str | None = Field(None, description=USER_ID)


class UpdateRequest(Strict):
    """``Engine.update``: only the fields present are changed."""

    content: str | None = None
    kind: str | None = None
    memory_type: str | None = None
    domains: list[str] | None = None
    importance: float | None = None
    confidence: float | None = None
    usefulness: float | None = None
    pinned: bool | None = None
    muted: bool | None = None
    event_at: datetime | None = None
    key: str | None = None
    project: str | None = None
    metadata: dict[str, Any] | None = None
    now: datetime | None = None


class FlagRequest(Strict):
    """Pin or mute (``value: true``), unpin or unmute (``value: false``)."""

    value: bool = True
    user_id: str | None = Field(None, description=USER_ID + " Or in the query.")
    now: datetime | None = None


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


class ContextOut(BaseModel):
    """The memory block for a message: ``text`` goes into the prompt, ``context_id`` into
    ``POST /v1/feedback``."""

    context_id: str
    text: str
    tokens: int
    budget: int | None = Field(description="The gate's token budget; null when a compiled "
                                            "tier answered.")  # fmt: skip
    tier: int
    fallback: bool
    elapsed_ms: float
    memories: list[MemoryOut]
    recall: RecallOut
    gated: GatedOut | None


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
