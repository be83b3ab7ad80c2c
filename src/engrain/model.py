"""The data model: memories, their two labels, turns, and the results of ingest.

Every memory carries two labels (DESIGN.md):

* ``memory_type`` — one of the spec's four (episodic, semantic, procedural, working). It drives
  storage behaviour (procedural memories are a key-value store placed first at recall),
  compression, and the ``[TYPE]`` prompt format.
* ``kind`` — the finer label (invariant, pattern, decision, …). It drives default confidence
  (ADR-002), and later decay half-life, type boost, thresholds and the section a memory is
  rendered under.
"""

from __future__ import annotations

import hashlib
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from engrain.errors import UnknownValueError

Vector = npt.NDArray[np.float32]
E = TypeVar("E", bound=StrEnum)


class MemoryType(StrEnum):
    """The spec's four memory types (memory-logic-spec section 1.6)."""

    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"
    WORKING = "working"

    @classmethod
    def parse(cls, value: str | MemoryType) -> MemoryType:
        """The member for ``value`` (case-insensitive), or :class:`UnknownValueError`."""
        return _parse_enum(cls, value, "memory type")


class Kind(StrEnum):
    """The finer label of a memory (relevance gating's learning types plus ADR-002's kinds)."""

    INVARIANT = "invariant"
    PATTERN = "pattern"
    DECISION = "decision"
    ANTIPATTERN = "antipattern"
    GOLDEN_PATH = "golden_path"
    PREFERENCE = "preference"
    FACT = "fact"
    CONTEXT = "context"
    CORRECTION = "correction"
    SUMMARY = "summary"
    EVENT = "event"

    @classmethod
    def parse(cls, value: str | Kind) -> Kind:
        """The member for ``value`` (case-insensitive, ``-`` or ``_``), or UnknownValueError."""
        if isinstance(value, str):
            value = value.replace("-", "_")
        return _parse_enum(cls, value, "kind")

    @property
    def default_memory_type(self) -> MemoryType:
        """The memory type a memory of this kind gets when the caller names none."""
        return KIND_DEFAULT_TYPE[self]

    @property
    def default_confidence(self) -> float:
        """ADR-002's default confidence for this kind."""
        return KIND_DEFAULT_CONFIDENCE[self]


#: Each kind has one default memory type. Preferences are the spec's procedural memory
#: ("user preferences ... small and critical"); context is about the current situation
#: (working); events are what happened (episodic); everything else is durable knowledge.
KIND_DEFAULT_TYPE: Mapping[Kind, MemoryType] = {
    Kind.INVARIANT: MemoryType.SEMANTIC,
    Kind.PATTERN: MemoryType.SEMANTIC,
    Kind.DECISION: MemoryType.SEMANTIC,
    Kind.ANTIPATTERN: MemoryType.SEMANTIC,
    Kind.GOLDEN_PATH: MemoryType.SEMANTIC,
    Kind.PREFERENCE: MemoryType.PROCEDURAL,
    Kind.FACT: MemoryType.SEMANTIC,
    Kind.CONTEXT: MemoryType.WORKING,
    Kind.CORRECTION: MemoryType.SEMANTIC,
    Kind.SUMMARY: MemoryType.SEMANTIC,
    Kind.EVENT: MemoryType.EPISODIC,
}

#: ADR-002 table: preference, fact, correction 1.0; context 0.8. The ADR names no others:
#: invariants are user-stated rules (1.0); learned items that may be revised get 0.9;
#: machine-made summaries and raw events 0.8, like context.
KIND_DEFAULT_CONFIDENCE: Mapping[Kind, float] = {
    Kind.PREFERENCE: 1.0,
    Kind.FACT: 1.0,
    Kind.CORRECTION: 1.0,
    Kind.CONTEXT: 0.8,
    Kind.INVARIANT: 1.0,
    Kind.PATTERN: 0.9,
    Kind.DECISION: 0.9,
    Kind.ANTIPATTERN: 0.9,
    Kind.GOLDEN_PATH: 0.9,
    Kind.SUMMARY: 0.8,
    Kind.EVENT: 0.8,
}

#: The kind a memory gets from ingestion when only its memory type is known.
TYPE_DEFAULT_KIND: Mapping[MemoryType, Kind] = {
    MemoryType.EPISODIC: Kind.EVENT,
    MemoryType.SEMANTIC: Kind.FACT,
    MemoryType.PROCEDURAL: Kind.PREFERENCE,
    MemoryType.WORKING: Kind.CONTEXT,
}


def _parse_enum(cls: type[E], value: str | E, what: str) -> E:
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value.strip().lower())
        except ValueError:
            pass
    allowed = ", ".join(m.value for m in cls)
    raise UnknownValueError(f"unknown {what} {value!r}; expected one of: {allowed}")


def utcnow() -> datetime:
    """The wall clock in UTC, the default ``now`` of every time computation."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime (naive datetimes are taken to be UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def new_id() -> str:
    """A new memory id: 32 hex characters, sortable by nothing in particular."""
    return uuid.uuid4().hex


def content_hash(text: str) -> str:
    """The sha256 of the NFC-normalised text: the key of the embedding cache and of dedup."""
    return hashlib.sha256(unicodedata.normalize("NFC", text).encode("utf-8")).hexdigest()


#: The provenance metadata keys engrain writes itself, never a caller (``validate.py``
#: refuses them in a caller's metadata): ``history`` (the texts a near-duplicate merge
#: replaced, ``ingest/plan.py``), ``conflicts_with`` and ``corrects`` (``corrections.py``)
#: and ``distinct_from`` (``review.py``).
ENGINE_METADATA = frozenset({"history", "conflicts_with", "corrects", "distinct_from"})


def ids_in(metadata: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """The memory ids an engine key of ``metadata`` lists (``conflicts_with``,
    ``distinct_from``); none if it holds anything but a list of strings, as a memory stored
    before the keys were refused in a caller's metadata may."""
    value = metadata.get(key)
    if not isinstance(value, list):
        return ()
    return tuple(i for i in value if isinstance(i, str))


@dataclass(frozen=True)
class Provenance:
    """Where a memory came from: the ids of its input turns and the caller's metadata."""

    turn_ids: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"turn_ids": list(self.turn_ids), "metadata": dict(self.metadata)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Provenance:
        """Inverse of :meth:`to_dict`."""
        if not data:
            return cls()
        return cls(
            turn_ids=tuple(str(t) for t in data.get("turn_ids", ())),
            metadata=dict(data.get("metadata", {})),
        )


#: The confidence of a memory nobody set one for: Phase 3's scorer reads a missing
#: confidence as 0.8 (``memory.get("confidence", 0.8)``), not as certainty.
UNSET_CONFIDENCE = 0.8


@dataclass(frozen=True)
class Memory:
    """One memory of one user. Immutable: changes go through :meth:`evolve`."""

    id: str
    user_id: str
    content: str
    memory_type: MemoryType
    kind: Kind
    created_at: datetime
    updated_at: datetime
    project: str | None = None
    domains: tuple[str, ...] = ()
    session_id: str | None = None
    event_at: datetime | None = None
    key: str | None = None
    importance: float = 1.0
    confidence: float = UNSET_CONFIDENCE
    usefulness: float = 0.5
    access_count: int = 0
    last_accessed_at: datetime | None = None
    pinned: bool = False
    muted: bool = False
    promoted_at: datetime | None = None
    compressed: bool = False
    compression_source: bool = False
    source_session_id: str | None = None
    superseded_by: str | None = None
    provenance: Provenance = field(default_factory=Provenance)
    content_hash: str = ""
    embedding: Vector | None = field(default=None, compare=False, repr=False)
    #: ``count_tokens(" " + content)``: the cl100k tokens of the content as it follows a
    #: line's prefix (``[TYPE] …``), kept with the row so that selection and assembly need
    #: not count it (SQLite migration 007, PostgreSQL 009; ``recall/lines.py``). ``None``
    #: where not known (a memory not yet written); a store fills it when it writes the
    #: memory. Derived from ``content``: :meth:`evolve` drops it when the content changes.
    content_tokens: int | None = field(default=None, compare=False, repr=False)

    @classmethod
    def new(
        cls,
        user_id: str,
        content: str,
        memory_type: MemoryType,
        kind: Kind,
        *,
        now: datetime,
        embedding: Vector | None = None,
        **fields: Any,
    ) -> Memory:
        """A memory created ``now``: a fresh id, ``created_at = updated_at = now`` and the
        content's hash; ``fields`` sets any other field (project, importance, …)."""
        return cls(
            id=new_id(), user_id=user_id, content=content, memory_type=memory_type, kind=kind,
            created_at=now, updated_at=now, content_hash=content_hash(content),
            embedding=embedding, **fields,
        )  # fmt: skip

    def evolve(self, **changes: Any) -> Memory:
        """A copy with ``changes`` applied; new content without its own ``content_tokens``
        drops the count (it was the old content's)."""
        content = changes.get("content", self.content)
        if content != self.content and "content_tokens" not in changes:
            changes["content_tokens"] = None
        return replace(self, **changes)

    def built(self) -> Memory:
        """This memory (:class:`MemoryFields`: a memory is already built)."""
        return self

    @property
    def when(self) -> datetime:
        """The time the memory is about: its event time, else when it was last written."""
        return self.event_at or self.updated_at

    def to_dict(self, *, with_embedding: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; lossless with ``with_embedding=True`` (see :meth:`from_dict`)."""
        data: dict[str, Any] = {
            "id": self.id,
            "user_id": self.user_id,
            "project": self.project,
            "content": self.content,
            "memory_type": self.memory_type.value,
            "kind": self.kind.value,
            "domains": list(self.domains),
            "session_id": self.session_id,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "event_at": self.event_at.isoformat() if self.event_at else None,
            "key": self.key,
            "importance": self.importance,
            "confidence": self.confidence,
            "usefulness": self.usefulness,
            "access_count": self.access_count,
            "last_accessed_at": _iso(self.last_accessed_at),
            "pinned": self.pinned,
            "muted": self.muted,
            "promoted_at": _iso(self.promoted_at),
            "compressed": self.compressed,
            "compression_source": self.compression_source,
            "source_session_id": self.source_session_id,
            "superseded_by": self.superseded_by,
            "provenance": self.provenance.to_dict(),
            "content_hash": self.content_hash,
        }
        if with_embedding:
            data["embedding"] = None if self.embedding is None else self.embedding.tolist()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Memory:
        """Build a memory from :meth:`to_dict` output (missing optional fields get defaults)."""
        embedding = data.get("embedding")
        content = str(data["content"])
        return cls(
            id=str(data.get("id") or new_id()),
            user_id=str(data["user_id"]),
            project=data.get("project"),
            content=content,
            memory_type=MemoryType.parse(data["memory_type"]),
            kind=Kind.parse(data["kind"]),
            domains=tuple(data.get("domains") or ()),
            session_id=data.get("session_id"),
            created_at=_parse_dt(data["created_at"]),
            updated_at=_parse_dt(data.get("updated_at") or data["created_at"]),
            event_at=_parse_opt_dt(data.get("event_at")),
            key=data.get("key"),
            importance=float(data.get("importance", 1.0)),
            confidence=float(data.get("confidence", UNSET_CONFIDENCE)),
            usefulness=float(data.get("usefulness", 0.5)),
            access_count=int(data.get("access_count", 0)),
            last_accessed_at=_parse_opt_dt(data.get("last_accessed_at")),
            pinned=bool(data.get("pinned", False)),
            muted=bool(data.get("muted", False)),
            promoted_at=_parse_opt_dt(data.get("promoted_at")),
            compressed=bool(data.get("compressed", False)),
            compression_source=bool(data.get("compression_source", False)),
            source_session_id=data.get("source_session_id"),
            superseded_by=data.get("superseded_by"),
            provenance=Provenance.from_dict(data.get("provenance")),
            content_hash=str(data.get("content_hash") or content_hash(content)),
            embedding=None if embedding is None else np.asarray(embedding, dtype=np.float32),
        )


class MemoryFields(Protocol):
    """A memory as recall reads it before deciding to show it: a built :class:`Memory`, or
    a row of a working set whose fields are read from its columns when asked
    (``store/found.py``), so a call builds memory objects only for what it returns
    (issue 18). Read only; :meth:`built` gives the memory itself."""

    @property
    def id(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def memory_type(self) -> MemoryType: ...
    @property
    def kind(self) -> Kind: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...
    @property
    def project(self) -> str | None: ...
    @property
    def domains(self) -> tuple[str, ...]: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def event_at(self) -> datetime | None: ...
    @property
    def key(self) -> str | None: ...
    @property
    def importance(self) -> float: ...
    @property
    def confidence(self) -> float: ...
    @property
    def usefulness(self) -> float: ...
    @property
    def access_count(self) -> int: ...
    @property
    def last_accessed_at(self) -> datetime | None: ...
    @property
    def pinned(self) -> bool: ...
    @property
    def muted(self) -> bool: ...
    @property
    def promoted_at(self) -> datetime | None: ...
    @property
    def compressed(self) -> bool: ...
    @property
    def compression_source(self) -> bool: ...
    @property
    def source_session_id(self) -> str | None: ...
    @property
    def superseded_by(self) -> str | None: ...
    @property
    def provenance(self) -> Provenance: ...
    @property
    def content_hash(self) -> str: ...
    @property
    def embedding(self) -> Vector | None: ...
    @property
    def content_tokens(self) -> int | None: ...
    @property
    def when(self) -> datetime: ...

    def built(self) -> Memory:
        """The memory object of these fields (built on first call for a row)."""
        ...


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _parse_dt(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        return as_utc(value)
    return as_utc(datetime.fromisoformat(value))


def _parse_opt_dt(value: str | datetime | None) -> datetime | None:
    return None if value is None or value == "" else _parse_dt(value)


@dataclass(frozen=True)
class Turn:
    """One turn of a conversation, the input of the conversation path."""

    speaker: str
    text: str
    turn_id: str | None = None
    at: datetime | None = None


@dataclass(frozen=True)
class Outcome:
    """What happened to one piece of input.

    ``action`` is ``"stored"`` (a new memory, ``memory_id``), ``"merged"`` (the near-duplicate
    ``memory_id`` was updated instead) or ``"discarded"`` (``reason`` says why).
    """

    action: Literal["stored", "merged", "discarded"]
    content: str
    memory_id: str | None = None
    reason: str | None = None
    importance: float | None = None
    memory_type: MemoryType | None = None
    turn_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "action": self.action,
            "memory_id": self.memory_id,
            "reason": self.reason,
            "importance": self.importance,
            "memory_type": self.memory_type.value if self.memory_type else None,
            "turn_ids": list(self.turn_ids),
            "content": self.content,
        }


@dataclass(frozen=True)
class IngestReport:
    """The outcome of every chunk of one ingest call, in input order."""

    outcomes: tuple[Outcome, ...]

    def _ids(self, action: str) -> list[str]:
        return [o.memory_id for o in self.outcomes if o.action == action and o.memory_id]

    @property
    def stored(self) -> list[str]:
        """Ids of the memories this call created."""
        return self._ids("stored")

    @property
    def merged(self) -> list[str]:
        """Ids of existing memories this call updated instead of inserting a near-duplicate."""
        return self._ids("merged")

    @property
    def discarded(self) -> list[Outcome]:
        """Outcomes of the chunks that were not kept, with their reasons."""
        return [o for o in self.outcomes if o.action == "discarded"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"outcomes": [o.to_dict() for o in self.outcomes]}


#: Recall's result types now live in ``engrain.recall.results`` (below the stages that
#: produce them); these names resolve there lazily for code that still imports them from
#: here, without this module importing ``recall`` when it loads.
def ensure_sequence(value: Sequence[str] | str | None) -> tuple[str, ...]:
    """Normalise a domains-like argument: one string or a sequence of strings, deduplicated."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    seen: dict[str, None] = {}
    for item in items:
        tag = str(item).strip().lower()
        if tag:
            seen.setdefault(tag, None)
    return tuple(seen)
