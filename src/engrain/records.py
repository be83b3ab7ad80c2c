"""The import/export stage: a user's memories and learned state as JSON-ready records.

Four record types: ``memory`` (every field of a memory, embedding included, and the model
that made the embedding), ``conversation`` (``user_id``, ``session_id``, ``turns``: the
conversation path), ``text`` (``user_id``, ``text``: the ingest path) and ``remember``
(``user_id``, ``content`` and any other argument of ``Engine.remember``: the learning path).

A ``remember`` record is how a user writes their own memories by hand: ``kind``,
``memory_type``, ``project``, ``domains``, ``key``, ``confidence``, ``importance``,
``pinned``, ``muted``, ``access_count`` (usage counted elsewhere), ``session_id``,
``event_at``, ``corrects``, ``metadata``, and ``at``, the time it was remembered (default:
the import's ``now``), as ISO 8601 strings. Each is validated as ``remember`` validates it;
a field ``remember`` does not take is refused, so a misspelt ``pinned`` is not lost. Records
are planned in order as sequential calls would be: a later record merges into an earlier
near-duplicate, supersedes an earlier memory it corrects, or is flagged against one it
contradicts.

Export is lossless: each user's memories, oldest first, and on the first of them a
``state`` list holding every state document the engine learned for that user
(co-occurrence, context records; ``namespace``, ``key``, ``value``), sorted by namespace
and key. The learned state rides on a memory record rather than in a record type of its
own so that every line of an export stays a memory: readers of the memory format (and
older engrain versions, which ignore the unknown field) keep working. Compiled tiers are
left out: they are a cache of the memories (whose access counts and promotions, the tiers'
inputs, travel with them) and are rebuilt on first use. So export → import → export is
byte-identical, and ``context()`` answers the same after. A ``{"type": "state", "user_id",
"namespace", "key", "value"}`` record is also accepted on import. A document of a namespace
engrain reads (co-occurrence, context records) must hold what engrain writes there
(``feedback.check_document``: any other shape failed every later call reading it); a
compiled tier set, a cache, is not imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from engrain import feedback, validate
from engrain.embed import Embedder
from engrain.errors import ValidationError
from engrain.ingest.plan import Draft, Item, Origin, Planner, Staged, checked_turns
from engrain.model import Kind, Memory, Turn, Vector
from engrain.store.base import State, Store
from engrain.tiers.cache import NAMESPACE as TIERS

#: State namespaces that are caches, rebuilt rather than exported.
CACHES = frozenset({TIERS})


@dataclass(frozen=True)
class Input:
    """A validated ``conversation`` (``turns``) or ``text`` import record."""

    origin: Origin
    text: str | None
    turns: list[Turn] | None


#: The fields of a ``remember`` record: ``Engine.remember``'s arguments and its time.
REMEMBER_FIELDS = frozenset(
    {"type", "user_id", "content", "kind", "memory_type", "project", "domains", "key",
     "confidence", "importance", "pinned", "muted", "access_count", "session_id", "event_at",
     "corrects", "metadata", "at"}
)  # fmt: skip


@dataclass(frozen=True)
class Remembered:
    """A validated ``remember`` record: the item, where it comes from and when."""

    origin: Origin
    item: Item
    at: datetime | None


@dataclass(frozen=True)
class Restored:
    """An exported memory record, validated: the memory and the user state it carried."""

    memory: Memory
    states: tuple[State, ...] = ()


def export(store: Store, users: list[str], model_id: str) -> Iterator[dict[str, Any]]:
    """The records of ``users``: memories oldest first, the first carrying the user's
    learned state (a user without memories has nothing to export)."""
    for user in users:
        learned = [{"namespace": doc.namespace, "key": doc.key, "value": dict(doc.value)}
                   for doc in store.states(user)
                   if doc.namespace not in CACHES and doc.value is not None]  # fmt: skip
        for memory in reversed(store.query(user)):
            record = {"type": "memory", **memory.to_dict(with_embedding=True)}
            record["embedding_model"] = model_id
            if learned:
                record["state"], learned = learned, []
            yield record


def remembered(record: Mapping[str, Any], *, max_chars: int) -> Remembered:
    """A ``remember`` record, validated as ``Engine.remember`` validates its arguments."""
    unknown = sorted(set(record) - REMEMBER_FIELDS)
    if unknown:
        raise ValidationError(f"{unknown[0]}: not a field of a remember record "
                              f"(fields: {', '.join(sorted(REMEMBER_FIELDS))})")  # fmt: skip
    item = Item.checked(
        record.get("content"), record.get("kind", Kind.FACT), max_chars=max_chars,
        memory_type=record.get("memory_type"), key=record.get("key"),
        confidence=record.get("confidence"), importance=record.get("importance", 1.0),
        pinned=record.get("pinned", False), muted=record.get("muted", False),
        access_count=record.get("access_count", 0),
        event_at=validate.timestamp(record.get("event_at"), "event_at"),
        corrects=record.get("corrects"),
    )  # fmt: skip
    origin = Origin.checked(record.get("user_id"), record.get("session_id"),
                            record.get("project"), record.get("domains"), None,
                            record.get("metadata"), max_chars=max_chars)  # fmt: skip
    return Remembered(origin, item, validate.timestamp(record.get("at"), "at"))


def check(
    number: int, record: object, *, max_chars: int, model_id: str, dim: int
) -> Restored | State | Input | Remembered:
    """Import record ``number``, validated: a memory (without its vector if another model
    made it, or no model could have: another dimension, or not of unit length) with the
    state it carries, a state document or an ingest
    input. A bad record is a
    :class:`ValidationError` starting ``record N:`` and naming the field."""
    try:
        if not isinstance(record, Mapping):
            raise ValidationError(f"must be a JSON object, not {type(record).__name__}")
        kind = record.get("type", "memory")
        if kind == "memory":
            memory = validate.memory_record(record, max_chars=max_chars)
            model = record.get("embedding_model")
            if memory.embedding is not None and (
                (model and model != model_id) or not _from_a_model(memory.embedding, dim)
            ):
                memory = memory.evolve(embedding=None)
            docs = validate.attached_states(record.get("state"), memory.user_id)
            for i, doc in enumerate(docs):
                try:
                    feedback.check_document(doc.namespace, doc.key, doc.value)
                except ValidationError as exc:
                    raise type(exc)(f"state[{i}].{exc.message}") from exc
            return Restored(memory, tuple(State(d.user_id, d.namespace, d.key, d.value)
                                          for d in docs))  # fmt: skip
        if kind == "state":
            doc = validate.state_record(record)
            feedback.check_document(doc.namespace, doc.key, doc.value)
            return State(doc.user_id, doc.namespace, doc.key, doc.value)
        if kind == "remember":
            return remembered(record, max_chars=max_chars)
        if kind not in ("conversation", "text"):
            raise ValidationError(f"type: unknown record type {kind!r}")
        conversation = kind == "conversation"
        origin = Origin.checked(
            record.get("user_id"), record.get("session_id"), record.get("project"),
            record.get("domains"), record.get("memory_type"), record.get("metadata"),
            hint_field="memory_type", max_chars=max_chars,
        )  # fmt: skip
        if conversation:
            return Input(origin, None, checked_turns(record.get("turns"), max_chars))
        return Input(origin, validate.text(record.get("text"), max_chars=max_chars), None)
    except ValidationError as exc:
        raise type(exc)(f"record {number}: {exc.message}") from exc


#: How far from 1 the length of an imported vector may be for it to be kept: an exported
#: vector is the model's unit vector written as float32 (off by ~1e-7); any other length was
#: edited or made elsewhere, and scored as it is it would outrank, or never reach, every
#: other memory of its user (a length of 1e30 came first for every query).
UNIT_TOLERANCE = 1e-3


def _from_a_model(vector: Vector, dim: int) -> bool:
    """Whether ``vector`` could be the embedder's: its dimension, and of unit length."""
    return (
        vector.shape == (dim,)
        and abs(float(np.linalg.norm(vector.astype(np.float64))) - 1.0) <= UNIT_TOLERANCE
    )


def unique_ids(checked: Iterable[object]) -> None:
    """Refuse an import holding one memory (a user's memory id) twice: a line duplicated or
    edited by hand, where one copy would silently replace the other."""
    seen: set[tuple[str, str]] = set()
    for number, item in enumerate(checked, 1):
        if isinstance(item, Restored):
            key = (item.memory.user_id, item.memory.id)
            if key in seen:
                raise ValidationError(
                    f"record {number}: id: memory {key[1]!r} of user {key[0]!r} is already in "
                    "this import (an import holds each memory once)"
                )
            seen.add(key)


@dataclass(frozen=True)
class Batch:
    """An import validated and embedded, ready to plan: each record as a memory (vector
    filled in), a state document, an ingest input with its embedded drafts, or a remembered
    item with its vector."""

    items: tuple[Restored | State | tuple[Input, list[Draft]] | tuple[Remembered, Vector], ...]

    @property
    def memories(self) -> list[Memory]:
        """The restored memories."""
        return [i.memory for i in self.items if isinstance(i, Restored)]

    @property
    def states(self) -> list[State]:
        """The restored state documents: those memory records carried, and state records;
        not a cache's (:data:`CACHES`: compiled again from the memories, never imported)."""
        docs = [s for i in self.items if isinstance(i, Restored) for s in i.states] + [
            i for i in self.items if isinstance(i, State)
        ]
        return [s for s in docs if s.namespace not in CACHES]


def prepare(
    records: Iterable[object], planner: Planner, embedder: Embedder, *, max_chars: int
) -> Batch:
    """Every record validated (all before any embedding), then embedded: the drafts of
    ingest inputs, and memories whose vector is missing or from another model. No store
    access."""
    checked = [check(n, r, max_chars=max_chars, model_id=embedder.model_id, dim=embedder.dim)
               for n, r in enumerate(records, 1)]  # fmt: skip
    unique_ids(checked)
    missing = [r.memory for r in checked if isinstance(r, Restored) and r.memory.embedding is None]
    fixed: dict[str, Memory] = {}
    if missing:
        vectors = embedder.embed([m.content for m in missing])
        fixed = {m.id: m.evolve(embedding=vectors[i]) for i, m in enumerate(missing)}
    said = [r for r in checked if isinstance(r, Remembered)]
    said_vectors: Iterator[Vector] = iter(
        embedder.embed([r.item.text for r in said]) if said else []
    )
    items: list[Restored | State | tuple[Input, list[Draft]] | tuple[Remembered, Vector]] = []
    for item in checked:
        if isinstance(item, Restored):
            items.append(Restored(fixed.get(item.memory.id, item.memory), item.states))
        elif isinstance(item, State):
            items.append(item)
        elif isinstance(item, Remembered):
            items.append((item, next(said_vectors)))
        elif item.turns is not None:
            items.append((item, planner.conversation_drafts(item.turns)))
        else:
            items.append((item, planner.text_drafts(item.text or "", None)))
    return Batch(tuple(items))


def plan(
    batch: Batch,
    planner: Planner,
    now: datetime,
    staged: Staged,
    on_record: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Plan the records of ``batch`` in order into ``staged``: each restored memory as it
    is, then the ingest inputs and remembered items (later records see the earlier ones,
    restored memories included, as sequential calls would); how many chunks and items
    were stored, merged and discarded. ``on_record`` is called with each record's
    number."""
    counts = {"stored": 0, "merged": 0, "discarded": 0}
    for number, item in enumerate(batch.items, 1):
        if isinstance(item, Restored):  # seen by the records after it, as once written
            staged.restore(item.memory)
        elif isinstance(item, tuple) and isinstance(item[0], Remembered):
            said, vector = item
            outcome = planner.item(said.item, said.origin, vector, said.at or now, staged)
            counts[outcome.action] += 1
        elif isinstance(item, tuple):
            source, drafts = item
            if source.turns is not None:
                report = planner.conversation(drafts, source.origin, now, staged)
            else:
                report = planner.plan(drafts, source.origin, now, staged)
            for outcome in report.outcomes:
                counts[outcome.action] += 1
        if on_record:
            on_record(number)
    return counts
