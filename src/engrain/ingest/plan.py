"""The ingest planner: what an ingest, a conversation, a ``remember`` or an import writes.

Two phases, so the engine's lock is never held around embedding: :meth:`Planner.text_drafts`
and :meth:`Planner.conversation_drafts` clean, chunk and embed (no store access); then
:meth:`Planner.plan` and :meth:`Planner.item` read the store and decide, chunk by chunk,
what is discarded, what is new and which existing memory a near-duplicate updates. The
decisions accumulate in a :class:`Staged`: new memories (upserts) and the field changes of
existing ones (patches), written by the caller in one transaction, with what the plan
assumed about the procedural keys it looked up (claims, checked inside that transaction:
another process may have written the key since).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from engrain import relate, validate
from engrain.config import Settings
from engrain.corrections import CONFLICT_KINDS, disagreement
from engrain.embed import Embedder
from engrain.errors import InputTooLargeError
from engrain.ingest import importance as imp
from engrain.ingest.chunk import chunk_text, chunk_turns
from engrain.ingest.clean import clean_text
from engrain.ingest.dedup import Recent, best_duplicate, bigram_bits, find_duplicate, partition
from engrain.ingest.route import route
from engrain.ingest.signals import preference_key
from engrain.lifecycle import closed_error
from engrain.model import (
    TYPE_DEFAULT_KIND,
    IngestReport,
    Kind,
    Memory,
    MemoryType,
    Outcome,
    Provenance,
    Turn,
    Vector,
    content_hash,
)
from engrain.recall.classify import domains_of
from engrain.store import MemoryFilter, Store
from engrain.store.base import KeyClaim, Patch
from engrain.threads import Pool

#: Conversations embedded at once in one process while their callers do the text-only work.
SIDE_THREADS = 8
#: A draft's vector before the model has returned it.
EMPTY: Vector = np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class Draft:
    """A chunk on its way into the store."""

    text: str
    vector: Vector
    turn_ids: tuple[str, ...]
    event_at: datetime | None
    speakers: tuple[str, ...] = ()
    #: The text's salience and the signals that fired (:func:`importance.salience`), when
    #: computed while the model ran; ``None``: computed when planned.
    salience: tuple[float, list[str]] | None = None


@dataclass(frozen=True)
class Origin:
    """Where input comes from and what the caller said about it (validated values)."""

    user_id: str
    session_id: str | None = None
    project: str | None = None
    domains: tuple[str, ...] = ()
    hint: MemoryType | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def checked(
        cls,
        user_id: object,
        session_id: object = None,
        project: object = None,
        domains: object = None,
        hint: object = None,
        metadata: object = None,
        *,
        hint_field: str = "memory_type_hint",
        max_chars: int | None = None,
    ) -> Origin:
        """An origin from values as a caller sent them, each validated (the metadata's JSON
        within ``max_chars`` characters, the ``max_text_chars`` content may have)."""
        return cls(
            user_id=validate.user_id(user_id),
            session_id=validate.optional_identifier(session_id, "session_id"),
            project=validate.optional_identifier(project, "project"),
            domains=validate.domains(domains),
            hint=validate.optional_memory_type(hint, hint_field),
            metadata=validate.callers_metadata(metadata, max_chars=max_chars),
        )


def checked_turns(turns: object, max_chars: int) -> list[Turn]:
    """A conversation's turns, validated, within ``max_chars`` characters in all."""
    parsed = validate.turns(turns, max_chars=max_chars)
    total = sum(len(t.speaker) + len(t.text) + 3 for t in parsed)
    if total > max_chars:
        raise InputTooLargeError(f"turns have {total:,} characters in all; the limit is "
                                 f"{max_chars:,} (setting max_text_chars)")  # fmt: skip
    return parsed


@dataclass(frozen=True)
class Item:
    """One typed item of the learning path (``Engine.remember``, an import's ``remember``
    record), validated."""

    text: str
    kind: Kind
    memory_type: MemoryType
    key: str | None
    importance: float
    confidence: float
    pinned: bool
    event_at: datetime | None
    corrects: str | None
    muted: bool = False
    access_count: int = 0
    #: Whether ``key`` is the caller's (an identity: only that key's memory is updated)
    #: rather than derived from a procedural text (:func:`preference_key`).
    key_given: bool = False

    @classmethod
    def checked(
        cls,
        content: object,
        kind: object = Kind.FACT,
        *,
        max_chars: int,
        memory_type: object = None,
        key: object = None,
        confidence: object = None,
        importance: object = 1.0,
        pinned: object = False,
        muted: object = False,
        access_count: object = 0,
        event_at: object = None,
        corrects: object = None,
    ) -> Item:
        """An item from ``remember``'s arguments as a caller sent them, each validated; a
        procedural item without a key gets one from its text (``key_given`` false)."""
        text = clean_text(validate.text(content, "content", max_chars=max_chars))
        kind = validate.kind(kind)
        mtype = validate.optional_memory_type(memory_type) or kind.default_memory_type
        name = validate.optional_identifier(key, "key")
        if mtype is MemoryType.PROCEDURAL:
            name = name.strip() if name is not None else preference_key(text)
        return cls(
            text=text, kind=kind, memory_type=mtype, key=name,
            importance=validate.unit(importance, "importance"),
            confidence=validate.unit(kind.default_confidence if confidence is None
                                     else confidence, "confidence"),
            pinned=validate.flag(pinned, "pinned"),
            event_at=validate.moment(event_at, "event_at"),
            corrects=validate.optional_identifier(corrects, "corrects"),
            muted=validate.flag(muted, "muted"),
            access_count=validate.count(access_count), key_given=key is not None,
        )  # fmt: skip

    def carried(self, existing: Memory) -> dict[str, Any]:
        """What this item adds to the near-duplicate it updates besides its text: the pin
        or mute it asks for, and its usage when higher (a restatement never unpins, unmutes
        or forgets uses)."""
        fields: dict[str, Any] = {}
        if self.pinned and not existing.pinned:
            fields["pinned"] = True
        if self.muted and not existing.muted:
            fields["muted"] = True
        if self.access_count > existing.access_count:
            fields["access_count"] = self.access_count
        return fields


@dataclass
class Staged:
    """What one call writes: every memory it creates or changes, as it will be, in the
    order first touched; which of them are new; and the fields changed on the others."""

    memories: dict[str, Memory] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    #: What the plan assumed about the keys it looked up, checked by the write.
    claims: list[KeyClaim] = field(default_factory=list)
    #: Restored memories written as they are without the planning seeing them (:meth:`restore`).
    apart: list[Memory] = field(default_factory=list)

    def add(self, memory: Memory) -> None:
        """Stage a new memory."""
        self.memories[memory.id] = memory
        self.created.add(memory.id)

    def restore(self, memory: Memory) -> None:
        """Stage an exported memory (an import's), written as it is and seen by the
        records planned after it; one whose id another user's memory of this call already
        holds (ids are per user, this call's memories are held by id) is written without
        being seen, as every restored memory was before."""
        held = self.memories.get(memory.id)
        if held is not None and held.user_id != memory.user_id:
            self.apart.append(memory)
        else:
            self.add(memory)

    def change(self, memory: Memory, fields: Mapping[str, Any]) -> Memory:
        """Stage changed ``fields`` of ``memory`` (new in this call, or stored); returns the
        memory as it will be."""
        current = self.memories.get(memory.id, memory).evolve(**fields)
        self.memories[memory.id] = current
        if memory.id not in self.created:
            self.changes.setdefault(memory.id, {}).update(fields)
            self.owners[memory.id] = memory.user_id
        return current

    def patch(self, patches: Sequence[Patch]) -> None:
        """Stage patches made by another stage (the corrections)."""
        for p in patches:
            found = self.memories.get(p.memory_id)
            if found is not None:
                self.change(found, p.changes)
            else:
                self.changes.setdefault(p.memory_id, {}).update(p.changes)
                self.owners[p.memory_id] = p.user_id

    def mine(self, user_id: str) -> list[Memory]:
        """The user's staged memories, in the order first touched."""
        return [m for m in self.memories.values() if m.user_id == user_id]

    @property
    def upserts(self) -> list[Memory]:
        """The new memories (restored ones included)."""
        return [m for i, m in self.memories.items() if i in self.created] + self.apart

    @property
    def patches(self) -> list[Patch]:
        """The field changes of memories that existed before this call."""
        return [Patch(self.owners[i], i, fields) for i, fields in self.changes.items()]


class Planner:
    """Turns validated input into staged writes, reading ``store`` for novelty, dedup and
    corrections; the settings give the chunk sizes and thresholds."""

    def __init__(self, store: Store, embedder: Embedder, settings: Settings) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self._side_pool: Pool | None = None
        self._side_pid = 0
        self._side_lock = threading.Lock()
        self._closed = False

    def _domains(self, text: str) -> tuple[str, ...]:
        """The domains of a memory stored without any: the built-in ones and the user's
        ``domain_vocabulary`` found in its text."""
        return domains_of(text, self.settings.domain_vocabulary)

    # -- phase 1: clean, chunk, embed (no store) ----------------------------------------------

    def text_drafts(self, text: str, event_at: datetime | None) -> list[Draft]:
        """The chunks of free text, embedded."""
        chunks = chunk_text(
            clean_text(text),
            max_tokens=self.settings.max_chunk_tokens,
            min_tokens=self.settings.min_chunk_tokens,
        )
        vectors = self.embedder.embed(chunks)
        return [Draft(c, vectors[i], (), event_at) for i, c in enumerate(chunks)]

    def conversation_drafts(self, turns: Sequence[Turn]) -> list[Draft]:
        """The chunks of a conversation, embedded: consecutive short turns merged, each
        chunk with the ids of its turns, its speakers and the time of its first turn."""
        lines = [clean_text(f"{t.speaker}: {t.text}" if t.speaker else t.text) for t in turns]
        pieces = chunk_turns(
            lines,
            max_tokens=self.settings.max_chunk_tokens,
            min_tokens=self.settings.min_chunk_tokens,
        )
        texts = [p.text for p in pieces]
        # the chunks' text-only work (salience, bigrams for dedup) runs while the model
        # embeds them, instead of after it on the planning's serial path
        pending = self._side().submit(self.embedder.embed, texts) if len(texts) > 1 else None
        drafts = []
        for piece in pieces:
            sources = [turns[i] for i in piece.sources]
            ids = tuple(dict.fromkeys(t.turn_id for t in sources if t.turn_id))
            times = [t.at for t in sources if t.at is not None]
            speakers = tuple(dict.fromkeys(t.speaker for t in sources if t.speaker))
            bigram_bits(piece.text)  # cached for the dedup of this chunk
            drafts.append(Draft(piece.text, EMPTY, ids, min(times) if times else None, speakers,
                                imp.salience(piece.text, speakers)))  # fmt: skip
        vectors = pending.result() if pending is not None else self.embedder.embed(texts)
        return [replace(d, vector=v) for d, v in zip(drafts, vectors, strict=True)]

    def _side(self) -> Pool:
        """The threads a conversation's embedding runs on while the calling thread does
        the chunks' text-only work: one per concurrent call (started as needed, so calls of
        several threads still embed side by side), per planner and process (a forked child
        starts its own)."""
        with self._side_lock:
            if self._closed:  # a call that outlived close()'s wait starts no thread
                raise closed_error("planner")
            if self._side_pool is None or self._side_pid != os.getpid():
                self._side_pool = Pool(SIDE_THREADS, "engrain-embed")
                self._side_pid = os.getpid()
            return self._side_pool

    def close(self) -> None:
        """Stop the side threads once the embeddings they run are done (an engine closing:
        idle, they would stay until the planner is collected). A conversation planned
        after this raises ``StoreError`` instead of starting them again (``lifecycle.py``)."""
        with self._side_lock:
            pool, self._side_pool = self._side_pool, None
            self._closed = True
        if pool is not None:
            pool.shutdown(wait=True)

    # -- phase 2: decide (reads the store) ----------------------------------------------------

    def plan(
        self,
        drafts: Sequence[Draft],
        origin: Origin,
        now: datetime,
        staged: Staged,
        *,
        discard: bool = True,
    ) -> IngestReport:
        """Score, route and dedup ``drafts`` into ``staged``. With ``discard`` (free text,
        and conversations when ``conversation_discard`` is set) drafts below the importance
        threshold are dropped; without it they are kept with their low importance."""
        threshold = self.settings.importance_threshold
        centroid = self._centroid(origin.user_id, staged)
        memo: dict[MemoryType | Kind, Recent] = {}
        outcomes: list[Outcome] = []
        for draft in drafts:
            novelty = imp.novelty(draft.vector, centroid)
            salience, fired = draft.salience or imp.salience(draft.text, draft.speakers)
            score = round(imp.importance(novelty, salience), 6)
            note = None
            if score < threshold:
                note = (
                    f"importance {score:.2f} below {threshold} (novelty {novelty:.2f}, "
                    f"salience {salience:.2f}{': ' + ', '.join(fired) if fired else ''})"
                )
                if discard:
                    outcomes.append(Outcome("discarded", draft.text, None, note, score,
                                            turn_ids=draft.turn_ids))  # fmt: skip
                    continue
                note += "; kept: conversation turns are not discarded"
            mtype = route(draft.text, origin.hint)
            kind = TYPE_DEFAULT_KIND[mtype]
            key = preference_key(draft.text) if mtype is MemoryType.PROCEDURAL else None
            existing = self.find_existing(origin, mtype, key, draft.text, staged, memo,
                                          draft.vector)  # fmt: skip
            if existing is not None:
                fields = merge(existing, draft.text, draft.vector, now, draft.turn_ids,
                               draft.event_at, origin.metadata)  # fmt: skip
                staged.change(existing, fields)
                outcomes.append(Outcome("merged", draft.text, existing.id, note, score, mtype,
                                        draft.turn_ids))  # fmt: skip
                continue
            memory = Memory.new(
                origin.user_id, draft.text, mtype, kind, now=now, embedding=draft.vector,
                project=origin.project, domains=origin.domains or self._domains(draft.text),
                session_id=origin.session_id, event_at=draft.event_at, key=key,
                importance=score, confidence=kind.default_confidence,
                provenance=Provenance(draft.turn_ids, origin.metadata),
            )  # fmt: skip
            staged.add(memory)
            outcomes.append(Outcome("stored", draft.text, memory.id, note, score, mtype,
                                    draft.turn_ids))  # fmt: skip
        return IngestReport(tuple(outcomes))

    def conversation(
        self, drafts: Sequence[Draft], origin: Origin, now: datetime, staged: Staged
    ) -> IngestReport:
        """:meth:`plan` for a conversation's drafts: episodic unless hinted, and kept below
        the importance threshold unless ``conversation_discard``."""
        origin = replace(origin, hint=origin.hint or MemoryType.EPISODIC)
        return self.plan(drafts, origin, now, staged, discard=self.settings.conversation_discard)

    def item(
        self, item: Item, origin: Origin, vector: Vector, now: datetime, staged: Staged
    ) -> Outcome:
        """Stage one typed item: an item naming what it corrects (``corrects``, any kind),
        or a correction, supersedes it (:meth:`correction`); the memory holding the key
        the caller gave is updated, whatever it said (a key's new value replaces it), and
        an item with a key of its own is otherwise stored new, never merged into another
        memory; a near-duplicate of the same kind (or the procedural memory with the same
        derived key) is updated, unless it disagrees (then both are kept and flagged); a
        new statement is flagged against the close memories it disagrees with."""
        if item.kind is Kind.CORRECTION or item.corrects is not None:
            return self.correction(item, origin, vector, now, staged)
        twin = None
        existing = self.find_existing(origin, item.kind, item.key, item.text, staged, None,
                                      vector, key_only=item.key_given)  # fmt: skip
        if (
            existing is not None
            and item.memory_type is not MemoryType.PROCEDURAL  # a key's new value replaces it
            and not item.key_given
            and item.kind in CONFLICT_KINDS
            and disagreement(existing.content, item.text)
        ):
            twin = existing  # a near-duplicate that disagrees: kept apart, flagged
        elif existing is not None:
            fields = merge(existing, item.text, vector, now, (), item.event_at,
                           origin.metadata)  # fmt: skip
            merged = staged.change(existing, {**fields, **item.carried(existing)})
            return Outcome("merged", item.text, merged.id, importance=merged.importance,
                           memory_type=item.memory_type)  # fmt: skip
        memory = self._new(item, origin, vector, now, item.key)
        memory, patches, reason = relate.conflicts(self.store, self.settings, memory, twin,
                                                   staged.mine(origin.user_id))  # fmt: skip
        staged.add(memory)
        staged.patch(patches)
        return Outcome("stored", item.text, memory.id, reason, memory.importance,
                       item.memory_type)  # fmt: skip

    def correction(
        self, item: Item, origin: Origin, vector: Vector, now: datetime, staged: Staged
    ) -> Outcome:
        """Stage a correction: a new memory superseding its target (the memory named by
        ``corrects``, else the nearest close one, else none) and keeping its own kind.
        A key is one entry with one live memory (``docs/concurrency.md``, session 24):
        the correction takes the target's key when it names none and is of the target's
        kind (or a ``correction``): it is that entry's new value; and the live memory
        holding the key the correction then holds is superseded too. The target (still
        stored, not superseded) and the key lookup go with the write as claims, so a
        keyed write or another correction of the target committed meanwhile by another
        process has this call planned again (and a target superseded meanwhile refused,
        as it is one call after the other)."""
        target = relate.corrected(self.store, self.settings, origin.user_id, origin.project,
                                  item.corrects, vector, staged.mine(origin.user_id))  # fmt: skip
        key = item.key
        if target is not None and target.id not in staged.created:
            staged.claims.append(KeyClaim.live(target))
        if (
            target is not None
            and target.key is not None
            and not item.key_given
            and item.kind in (target.kind, Kind.CORRECTION)
        ):
            key = target.key
        holder = None
        if key is not None:
            holder = self.find_existing(origin, item.kind, key, item.text, staged, None,
                                        vector, key_only=True)  # fmt: skip
        memory = self._new(item, origin, vector, now, key)
        if target is None and holder is None:
            mine = staged.mine(origin.user_id)
            memory, patches, reason = relate.conflicts(
                self.store, self.settings, memory, None, mine
            )
        else:
            memory, patches, reason = relate.supersede(self.store, memory, target, now, holder)
        staged.add(memory)
        staged.patch(patches)
        return Outcome("stored", item.text, memory.id, reason, memory.importance,
                       item.memory_type)  # fmt: skip

    def _new(
        self, item: Item, origin: Origin, vector: Vector, now: datetime, key: str | None
    ) -> Memory:
        """The new memory ``item`` makes, holding ``key``."""
        return Memory.new(
            origin.user_id, item.text, item.memory_type, item.kind, now=now, embedding=vector,
            project=origin.project, domains=origin.domains or self._domains(item.text),
            session_id=origin.session_id, event_at=item.event_at, key=key,
            importance=item.importance, confidence=item.confidence, pinned=item.pinned,
            muted=item.muted, access_count=item.access_count,
            provenance=Provenance((), origin.metadata),
        )  # fmt: skip

    def _centroid(self, user_id: str, staged: Staged) -> Vector | None:
        """The centroid of the user's stored memories and of the new ones staged by earlier
        records of the same call (an import), so novelty is what sequential calls would see."""
        centroid = self.store.centroid(user_id)
        new = [
            m.embedding
            for i, m in staged.memories.items()
            if i in staged.created and m.user_id == user_id and m.embedding is not None
        ]
        if not new:
            return centroid
        total = np.sum(np.vstack(new), axis=0)
        count = 0 if centroid is None else self.store.count(user_id, MemoryFilter())
        base = np.zeros_like(total) if centroid is None else centroid * count
        mean: Vector = ((base + total) / (count + len(new))).astype(np.float32)
        return mean

    def find_existing(
        self,
        origin: Origin,
        like: MemoryType | Kind,
        key: str | None,
        text: str,
        staged: Staged,
        recent_memo: dict[MemoryType | Kind, Recent] | None = None,
        vector: Vector | None = None,
        *,
        key_only: bool = False,
    ) -> Memory | None:
        """The memory a new item should update: the one with the same key (procedural
        memories), else a bigram near-duplicate among the recent memories ``like`` it
        (staged ones of this call first). A typed item compares its kind, ADR-002's "same
        type": an invariant restating a pattern is stored apart and keeps its own boost,
        threshold and tier. A routed chunk, whose kind is only its memory type's default,
        compares its memory type, so free text restating a learning updates it.
        ``recent_memo`` keeps the store's recent memories across the chunks of one call.
        With ``key_only`` (a key the caller gave) only the key's memory is looked for: a
        near-duplicate holds another key or none, and merging into it would leave the
        caller's key held by no memory (``docs/concurrency.md``, key claims)."""
        user_id = origin.user_id
        project = origin.project
        by_kind = isinstance(like, Kind)
        same = MemoryFilter(project=project, include_superseded=False, include_compressed=False)
        if isinstance(like, Kind):
            same = same.update(kinds=(like,))
        else:
            same = same.update(memory_types=(like,))
        # this call's memories as the store's are looked up: an import's earlier record of
        # another project (or one a correction superseded) is not this one's duplicate
        alike = [m for m in reversed(staged.mine(user_id)) if same.matches(m)]
        if key is not None:
            # a correction that took a key over is that key's memory for every kind
            entry = (like, Kind.CORRECTION) if by_kind else None
            alike_ids = {m.id for m in alike}
            for memory in reversed(staged.mine(user_id)):
                if (
                    memory.key == key
                    and memory.project == project
                    and memory.superseded_by is None
                    and (memory.id in alike_ids or (by_kind and memory.kind is Kind.CORRECTION))
                ):
                    return memory
            keyed = same.update(key=key, kinds=entry) if by_kind else same.update(key=key)
            found = sorted(self.store.query(user_id, keyed, limit=2), key=lambda m: m.kind != like)
            staged.claims.append(KeyClaim(user_id, keyed, found[0].id if found else None))
            if found:
                return staged.memories.get(found[0].id, found[0])
        if key_only or self.settings.dedup_window == 0:
            return None
        memo = {} if recent_memo is None else recent_memo
        if like not in memo:
            memo[like] = Recent(self.store.query(user_id, same, limit=self.settings.dedup_window))
        recent = memo[like]
        staged_ids = {m.id for m in alike}
        if vector is None:
            pool = alike + [m for m in recent.memories if m.id not in staged_ids]
            return find_duplicate(text, pool, self.settings.dedup_threshold)
        # find_duplicate's pool and order (this call's chunks, then the stored ones), with
        # the stored memories' vectors stacked once per call
        near, bare = partition(alike, vector)
        stored_near, stored_bare = recent.partition(vector)
        candidates = (near + [m for m in stored_near if m.id not in staged_ids]
                      + bare + [m for m in stored_bare if m.id not in staged_ids])  # fmt: skip
        return best_duplicate(text, candidates, self.settings.dedup_threshold)


def merge(
    existing: Memory,
    text: str,
    vector: Vector,
    now: datetime,
    turn_ids: tuple[str, ...],
    event_at: datetime | None,
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """ADR-002: the fields a near-duplicate's update sets, its content and timestamp. The
    text it had is kept in its provenance, so nothing is lost. A ``history`` that is not a
    list (a memory stored before a caller's metadata was refused that key) is not one."""
    earlier = existing.provenance.metadata.get("history")
    history = [h for h in earlier if isinstance(h, Mapping)] if isinstance(earlier, list) else []
    if existing.content != text:
        history.append({"content": existing.content, "updated_at": existing.updated_at.isoformat()})
    metadata = {**existing.provenance.metadata, **meta}
    if history:
        metadata["history"] = history
    provenance = Provenance(tuple(dict.fromkeys(existing.provenance.turn_ids + turn_ids)), metadata)
    return {
        "content": text,
        "content_hash": content_hash(text),
        "embedding": vector,
        "updated_at": now,
        "event_at": event_at or existing.event_at,
        "provenance": provenance,
    }
