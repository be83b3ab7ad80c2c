"""The public facade: :class:`Engine` (sync) and :class:`AsyncEngine` (async), same methods.

The engine validates input, wires the pipeline stages together and writes through the
store in one transaction per call; the stages themselves live in ``ingest/`` and
``recall/``. Every time computation takes ``now`` (default: the wall clock).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from engrain import compress as compression
from engrain import feedback as fb
from engrain import validate
from engrain.background import Worker
from engrain.config import Settings, load_settings
from engrain.corrections import (
    CONFLICT_KINDS,
    CORRECTS,
    conflicts_of,
    disagreement,
    flag,
    unflag,
    with_meta,
)
from engrain.embed import CachedEmbedder, Embedder, make_embedder
from engrain.errors import InputTooLargeError, NotFoundError, ValidationError
from engrain.ingest import chunk_text, chunk_turns, clean_text, route
from engrain.ingest import importance as imp
from engrain.ingest.dedup import find_duplicate
from engrain.ingest.signals import preference_key
from engrain.llm import make_llm
from engrain.model import (
    TYPE_DEFAULT_KIND,
    Context,
    IngestReport,
    Kind,
    Memory,
    MemoryType,
    Outcome,
    Provenance,
    RecallResult,
    ScoredMemory,
    Turn,
    Vector,
    as_utc,
    content_hash,
    ensure_sequence,
    new_id,
    utcnow,
)
from engrain.recall import Reranker, enforce_budget, rerank
from engrain.recall import candidates as cand
from engrain.recall.assemble import Format, render
from engrain.recall.budget import Depth
from engrain.recall.classify import Complexity, classify, domains_of
from engrain.recall.gate import Gated, GateOptions, gate
from engrain.recall.score import Profile
from engrain.store import MemoryFilter, State, Store, open_store
from engrain.tiers import (
    PROMOTION_USES,
    TIER_BUDGETS,
    Tier,
    TierCache,
    TierSet,
    choose_tier,
    context_window,
)
from engrain.tiers.cache import wrap
from engrain.tokens import count_tokens

P = ParamSpec("P")
R = TypeVar("R")

#: Fields ``Engine.update`` may change.
UPDATABLE = frozenset(
    {"content", "kind", "memory_type", "domains", "importance", "confidence", "usefulness",
     "pinned", "muted", "event_at", "key", "project", "metadata"}
)  # fmt: skip


@dataclass(frozen=True)
class ImportResult:
    """What ``Engine.import_records`` did: memories restored, and ingest outcomes."""

    memories: int
    stored: int
    merged: int
    discarded: int


@dataclass
class _Draft:
    """A chunk on its way into the store."""

    text: str
    vector: Vector
    turn_ids: tuple[str, ...]
    event_at: datetime | None
    speakers: tuple[str, ...] = ()


class Engine:
    """engrain's memory engine.

    >>> engine = Engine("sqlite:///memory.db")
    >>> engine.remember("I prefer tabs over spaces", user_id="ada", kind="preference")
    >>> print(engine.context("How should I indent this file?", user_id="ada").text)

    ``url`` picks the store (``sqlite:///path``, ``memory://``); without it the settings
    decide (``ENGRAIN_URL``, else a SQLite file in the data directory).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        settings: Settings | None = None,
        store: Store | None = None,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        if settings is None:
            settings = load_settings({"url": url})
        elif url is not None:
            settings = settings.model_copy(update={"url": url})
        self.settings = settings
        self.store: Store = store if store is not None else open_store(settings.store_url)
        raw = embedder or make_embedder(settings.embedder, threads=settings.onnx_threads)
        self.embedder = CachedEmbedder(raw, self.store)
        self.reranker = reranker
        self.llm = make_llm(settings.llm_url, settings.llm_model, settings.llm_api_key,
                            timeout=settings.llm_timeout, retries=settings.llm_retries)  # fmt: skip
        self.worker = Worker()
        self.tier_cache = TierCache(
            self.store, self.llm.complete if self.llm else None, worker=self.worker
        )
        self._lock = threading.RLock()  # read-modify-write sequences of this process

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Finish background work (tier compilation, compression), then close the store."""
        self.worker.close()
        self.store.close()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the background work scheduled so far (tier compilation, automatic
        compression) is done."""
        self.worker.wait(timeout)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ingestion -------------------------------------------------------------------------

    def ingest(
        self,
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
    ) -> IngestReport:
        """Clean, chunk, embed, score, route and store free text (spec section 1).

        Chunks below importance 0.3 are discarded; near-duplicates of recent memories of the
        same type update those memories. The report says what happened to every chunk.
        """
        user_id = validate.user_id(user_id)
        text = validate.text(text, max_chars=self.settings.max_text_chars)
        session_id = validate.optional_identifier(session_id, "session_id")
        hint = validate.optional_memory_type(memory_type_hint, "memory_type_hint")
        project = validate.optional_identifier(project, "project")
        tags = validate.domains(domains)
        event_at = validate.moment(event_at, "event_at")
        meta = validate.metadata(metadata)
        when = validate.moment(now, "now") or utcnow()
        staged: dict[str, Memory] = {}
        with self._lock:
            report = self._plan_text(
                text, user_id, session_id, hint, project, tags, event_at, meta, when, staged
            )
            self.store.write(list(staged.values()))
        self._after_ingest(staged.values())
        return report

    def _plan_text(
        self,
        text: str,
        user_id: str,
        session_id: str | None,
        hint: MemoryType | None,
        project: str | None,
        domains: tuple[str, ...],
        event_at: datetime | None,
        meta: Mapping[str, Any],
        now: datetime,
        staged: dict[str, Memory],
    ) -> IngestReport:
        cleaned = clean_text(text)
        chunks = chunk_text(
            cleaned,
            max_tokens=self.settings.max_chunk_tokens,
            min_tokens=self.settings.min_chunk_tokens,
        )
        vectors = self.embedder.embed(chunks)
        drafts = [_Draft(c, vectors[i], (), event_at) for i, c in enumerate(chunks)]
        return self._plan(drafts, user_id, session_id, hint, project, domains, meta, now, staged)

    def ingest_conversation(
        self,
        turns: Sequence[Turn | Mapping[str, Any]],
        user_id: str,
        session_id: str | None = None,
        *,
        project: str | None = None,
        domains: Sequence[str] | str | None = None,
        memory_type_hint: MemoryType | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> IngestReport:
        """Store a session's turns at once (the conversation path).

        Each turn is ``Turn(speaker, text, turn_id, at)`` or a mapping with those keys.
        Consecutive short turns are merged into chunks; every chunk keeps the ids of its
        turns as provenance and the time of its first turn as its event time. A conversation
        is a record of events, so chunks are episodic unless a hint says otherwise.
        """
        user_id = validate.user_id(user_id)
        parsed = self._turns(turns)
        session_id = validate.optional_identifier(session_id, "session_id")
        project = validate.optional_identifier(project, "project")
        tags = validate.domains(domains)
        hint = validate.optional_memory_type(memory_type_hint, "memory_type_hint")
        meta = validate.metadata(metadata)
        when = validate.moment(now, "now") or utcnow()
        staged: dict[str, Memory] = {}
        with self._lock:
            report = self._plan_conversation(
                parsed, user_id, session_id, project, tags, hint, meta, when, staged
            )
            self.store.write(list(staged.values()))
        self._after_ingest(staged.values())
        return report

    def _plan_conversation(
        self,
        parsed: Sequence[Turn],
        user_id: str,
        session_id: str | None,
        project: str | None,
        domains: tuple[str, ...],
        hint: MemoryType | None,
        meta: Mapping[str, Any],
        now: datetime,
        staged: dict[str, Memory],
    ) -> IngestReport:
        lines = [clean_text(f"{t.speaker}: {t.text}" if t.speaker else t.text) for t in parsed]
        pieces = chunk_turns(
            lines,
            max_tokens=self.settings.max_chunk_tokens,
            min_tokens=self.settings.min_chunk_tokens,
        )
        vectors = self.embedder.embed([p.text for p in pieces])
        drafts = []
        for piece, vector in zip(pieces, vectors, strict=True):
            sources = [parsed[i] for i in piece.sources]
            ids = tuple(dict.fromkeys(t.turn_id for t in sources if t.turn_id))
            times = [t.at for t in sources if t.at is not None]
            speakers = tuple(dict.fromkeys(t.speaker for t in sources if t.speaker))
            drafts.append(_Draft(piece.text, vector, ids, min(times) if times else None, speakers))
        return self._plan(
            drafts, user_id, session_id, hint or MemoryType.EPISODIC, project, domains, meta,
            now, staged, discard=self.settings.conversation_discard,
        )  # fmt: skip

    def _turns(self, turns: object) -> builtins.list[Turn]:
        """The validated turns of a conversation, within ``max_text_chars`` in all."""
        limit = self.settings.max_text_chars
        parsed = validate.turns(turns, max_chars=limit)
        total = sum(len(t.speaker) + len(t.text) + 3 for t in parsed)
        if total > limit:
            raise InputTooLargeError(f"turns have {total:,} characters in all; the limit is "
                                     f"{limit:,} (setting max_text_chars)")  # fmt: skip
        return parsed

    def remember(
        self,
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
        session_id: str | None = None,
        event_at: datetime | None = None,
        corrects: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> Outcome:
        """Store one typed item as given (the learning path): no chunking, no importance
        discard. A near-duplicate of a recent memory of the same type (or, for procedural
        memories, the memory with the same key) is updated instead.

        A ``correction`` supersedes the memory it corrects (``corrects=id``, else the
        nearest active memory at least ``correction_similarity`` close): the old memory is
        kept and linked, and never injected again. A new fact, preference, decision, rule or
        context that disagrees with a close active memory is stored and both are flagged
        as conflicting (``Outcome.reason`` says which); they are then injected together."""
        user_id = validate.user_id(user_id)
        text = clean_text(validate.text(content, "content", max_chars=self.settings.max_text_chars))
        kind = validate.kind(kind)
        mtype = validate.optional_memory_type(memory_type) or kind.default_memory_type
        project = validate.optional_identifier(project, "project")
        tags = validate.domains(domains)
        key = validate.optional_identifier(key, "key")
        conf = validate.unit(kind.default_confidence if confidence is None else confidence,
                             "confidence")  # fmt: skip
        importance = validate.unit(importance, "importance")
        pinned = validate.flag(pinned, "pinned")
        session_id = validate.optional_identifier(session_id, "session_id")
        event_at = validate.moment(event_at, "event_at")
        corrects = validate.optional_identifier(corrects, "corrects")
        meta = validate.metadata(metadata)
        now = validate.moment(now, "now") or utcnow()
        if corrects is not None and kind is not Kind.CORRECTION:
            raise ValidationError("corrects= is for kind='correction'")
        if mtype is MemoryType.PROCEDURAL:
            key = key.strip() if key is not None else preference_key(text)
        vector = self.embedder.embed([text])[0]
        with self._lock:
            target = None
            if kind is Kind.CORRECTION:
                target = self._corrected(user_id, project, corrects, vector)
            else:
                existing = self._find_existing(user_id, project, mtype, key, text, (), None, vector)
                if (
                    existing is not None
                    and mtype is not MemoryType.PROCEDURAL  # a key's new value replaces it
                    and kind in CONFLICT_KINDS
                    and disagreement(existing.content, text)
                ):
                    target = existing  # a near-duplicate that disagrees: kept apart, flagged
                elif existing is not None:
                    merged = _merge(existing, text, vector, now, (), event_at, meta)
                    self.store.write([merged])
                    return Outcome("merged", text, merged.id, importance=merged.importance,
                                   memory_type=mtype)  # fmt: skip
            memory = Memory(
                id=new_id(), user_id=user_id, project=project, content=text, memory_type=mtype,
                kind=kind, created_at=now, updated_at=now,
                domains=tags or domains_of(text),
                session_id=session_id, event_at=event_at,
                key=key, importance=importance, confidence=conf,
                pinned=pinned, provenance=Provenance((), meta),
                content_hash=content_hash(text), embedding=vector,
            )  # fmt: skip
            if kind is Kind.CORRECTION:
                writes, reason = self._relate(memory, target, now)
            else:
                writes, reason = self._relate(memory, None, now, target)
            self.store.write(writes)
        self._after_ingest(writes)
        return Outcome("stored", text, memory.id, reason, memory.importance, mtype)

    def _corrected(
        self, user_id: str, project: str | None, corrects: str | None, vector: Vector
    ) -> Memory | None:
        """The memory a correction supersedes: the one named, else the nearest active one
        that is close enough (``None``: the correction stands alone)."""
        if corrects is not None:
            target = self.get(corrects, user_id)
            if target.superseded_by is not None:
                raise ValidationError(f"memory {corrects!r} is already superseded")
            return target
        flt = MemoryFilter(project=project, include_superseded=False, include_compressed=False)
        for memory, sim in self.store.search(user_id, vector, 3, flt):
            if sim >= self.settings.correction_similarity and memory.kind is not Kind.CORRECTION:
                return memory
        return None

    def _relate(
        self, memory: Memory, target: Memory | None, now: datetime, twin: Memory | None = None
    ) -> tuple[builtins.list[Memory], str | None]:
        """What to write with a new memory: a superseded target (and its conflicts resolved),
        or the close memories it disagrees with (``twin``: a near-duplicate that does),
        flagged both ways. Returns the writes and the outcome's reason."""
        if target is not None:
            partners = self.store.get(memory.user_id, list(conflicts_of(target)))
            memory = with_meta(memory, **{CORRECTS: target.id})
            old = unflag(target, conflicts_of(target)).evolve(superseded_by=memory.id,
                                                               updated_at=now)  # fmt: skip
            return [memory, old, *(unflag(p, [target.id]) for p in partners)], (
                f"supersedes {target.id}"
            )
        if memory.kind not in CONFLICT_KINDS or memory.embedding is None:
            return [memory], None
        flt = MemoryFilter(project=memory.project, kinds=tuple(CONFLICT_KINDS),
                           include_superseded=False, include_muted=False)  # fmt: skip
        clashes: builtins.list[tuple[Memory, str]] = []
        if twin is not None:
            clashes.append((twin, disagreement(twin.content, memory.content) or ""))
        for other, sim in self.store.search(memory.user_id, memory.embedding, 5, flt):
            why = disagreement(other.content, memory.content)
            if (
                sim >= self.settings.conflict_similarity
                and why
                and other.id != getattr(twin, "id", None)
            ):
                clashes.append((other, why))
        if not clashes:
            return [memory], None
        memory = flag(memory, [o.id for o, _ in clashes])
        others = [flag(o, [memory.id]) for o, _ in clashes]
        reason = "conflicts with " + ", ".join(f"{o.id} ({why})" for o, why in clashes)
        return [memory, *others], reason

    def _plan(
        self,
        drafts: Sequence[_Draft],
        user_id: str,
        session_id: str | None,
        hint: MemoryType | None,
        project: str | None,
        domains: tuple[str, ...],
        meta: Mapping[str, Any],
        now: datetime,
        staged: dict[str, Memory],
        *,
        discard: bool = True,
    ) -> IngestReport:
        """Score, route and dedup ``drafts`` into ``staged`` (id → memory to write); the
        caller writes ``staged`` in one transaction. With ``discard`` (free text, and
        conversations when ``conversation_discard`` is set) drafts below the importance
        threshold are dropped; without it they are kept with their low importance."""
        centroid = self._centroid(user_id, staged)
        memo: dict[MemoryType, builtins.list[Memory]] = {}
        outcomes: builtins.list[Outcome] = []
        for draft in drafts:
            novelty = imp.novelty(draft.vector, centroid)
            salience, fired = imp.salience(draft.text, draft.speakers)
            score = round(imp.importance(novelty, salience), 6)
            note = None
            if score < self.settings.importance_threshold:
                note = (
                    f"importance {score:.2f} below {self.settings.importance_threshold} "
                    f"(novelty {novelty:.2f}, salience {salience:.2f}"
                    f"{': ' + ', '.join(fired) if fired else ''})"
                )
                if discard:
                    outcomes.append(Outcome("discarded", draft.text, None, note, score,
                                            turn_ids=draft.turn_ids))  # fmt: skip
                    continue
                note += "; kept: conversation turns are not discarded"
            mtype = route(draft.text, hint)
            key = preference_key(draft.text) if mtype is MemoryType.PROCEDURAL else None
            mine = [m for m in staged.values() if m.user_id == user_id]
            existing = self._find_existing(
                user_id, project, mtype, key, draft.text, mine, memo, draft.vector
            )
            if existing is not None:
                merged = _merge(existing, draft.text, draft.vector, now, draft.turn_ids,
                                draft.event_at, meta)  # fmt: skip
                staged[merged.id] = merged
                outcomes.append(Outcome("merged", draft.text, merged.id, note, score, mtype,
                                        draft.turn_ids))  # fmt: skip
                continue
            kind = TYPE_DEFAULT_KIND[mtype]
            memory = Memory(
                id=new_id(), user_id=user_id, project=project, content=draft.text,
                memory_type=mtype, kind=kind, created_at=now, updated_at=now,
                domains=domains or domains_of(draft.text),
                session_id=session_id, event_at=draft.event_at, key=key, importance=score,
                confidence=kind.default_confidence,
                provenance=Provenance(draft.turn_ids, meta),
                content_hash=content_hash(draft.text), embedding=draft.vector,
            )  # fmt: skip
            staged[memory.id] = memory
            outcomes.append(Outcome("stored", draft.text, memory.id, note, score, mtype,
                                    draft.turn_ids))  # fmt: skip
        return IngestReport(tuple(outcomes))

    def _centroid(self, user_id: str, staged: Mapping[str, Memory]) -> Vector | None:
        """The centroid of the user's stored memories and of the new ones staged by earlier
        records of the same call (an import), so novelty is what sequential calls would see."""
        centroid = self.store.centroid(user_id)
        if not staged:
            return centroid
        existing = {m.id for m in self.store.get(user_id, list(staged))}
        new = [
            m.embedding
            for m in staged.values()
            if m.user_id == user_id and m.embedding is not None and m.id not in existing
        ]
        if not new:
            return centroid
        total = np.sum(np.vstack(new), axis=0)
        count = 0 if centroid is None else self.store.count(user_id, MemoryFilter())
        base = np.zeros_like(total) if centroid is None else centroid * count
        mean: Vector = ((base + total) / (count + len(new))).astype(np.float32)
        return mean

    def _find_existing(
        self,
        user_id: str,
        project: str | None,
        mtype: MemoryType,
        key: str | None,
        text: str,
        staged: Sequence[Memory],
        recent_memo: dict[MemoryType, builtins.list[Memory]] | None = None,
        vector: Vector | None = None,
    ) -> Memory | None:
        """The memory a new item should update: same key for procedural memories, else a
        bigram near-duplicate among the recent memories of the same type. ``recent_memo``
        keeps the store's recent memories across the chunks of one call."""
        same_type = [m for m in reversed(staged) if m.memory_type is mtype]
        if key is not None:
            for memory in same_type:
                if memory.key == key and memory.project == project:
                    return memory
            flt = MemoryFilter(project=project, key=key, memory_types=(mtype,),
                               include_superseded=False, include_compressed=False)  # fmt: skip
            found = self.store.query(user_id, flt, limit=1)
            if found:
                return found[0]
        if self.settings.dedup_window == 0:
            return None
        memo = {} if recent_memo is None else recent_memo
        if mtype not in memo:
            flt = MemoryFilter(project=project, memory_types=(mtype,),
                               include_superseded=False, include_compressed=False)  # fmt: skip
            memo[mtype] = self.store.query(user_id, flt, limit=self.settings.dedup_window)
        recent = memo[mtype]
        staged_ids = {m.id for m in same_type}
        pool = same_type + [m for m in recent if m.id not in staged_ids]
        return find_duplicate(text, pool, self.settings.dedup_threshold, vector)

    def _after_ingest(self, written: Iterable[Memory]) -> None:
        """Schedule the compression check of each user who got a new episodic memory (in
        the background: the ingest call never waits for it)."""
        if not self.settings.auto_compress:
            return
        users = {m.user_id for m in written if m.memory_type is MemoryType.EPISODIC}
        for user in users:
            self.worker.submit(("compress", user), functools.partial(self.compress, user))

    # -- compression -------------------------------------------------------------------------

    def compress(
        self, user_id: str, *, force: bool = False, now: datetime | None = None
    ) -> compression.CompressionReport:
        """Compress old sessions (spec section 3) when the user has more than
        ``compression_threshold`` uncompressed episodic sessions (or now, with ``force``):
        the oldest ``sessions_to_compress`` each become one semantic summary memory
        (``source_session_id``, ``compression_source=True``; by the LLM when one is
        configured, else extractive), and their episodic memories are marked compressed,
        kept, and left out of recall unless ``include_compressed=True``. One transaction
        per call. Also drops context records older than ``context_retention_days``."""
        user_id = validate.user_id(user_id)
        force = validate.flag(force, "force")
        when = validate.moment(now, "now") or utcnow()
        s = self.settings
        self.store.expire_state(user_id, fb.CONTEXTS,
                                when - timedelta(days=s.context_retention_days))  # fmt: skip
        flt = MemoryFilter(memory_types=(MemoryType.EPISODIC,), include_compressed=False)
        due = compression.due(self.store.query(user_id, flt), s.compression_threshold,
                              s.sessions_to_compress, force=force)  # fmt: skip
        if not due:
            return compression.CompressionReport()
        written = [compression.summarize(session, self.llm.complete if self.llm else None)
                   for session in due]  # fmt: skip
        vectors = self.embedder.embed([text for text, _ in written])
        summaries, originals = [], []
        with self._lock:
            for session, (text, by), vector in zip(due, written, vectors, strict=True):
                current = self.store.get(user_id, [m.id for m in session.memories])
                projects = {m.project for m in current}
                turn_ids = tuple(dict.fromkeys(t for m in current for t in m.provenance.turn_ids))
                summaries.append(Memory(
                    id=new_id(), user_id=user_id, content=text,
                    memory_type=MemoryType.SEMANTIC, kind=Kind.SUMMARY,
                    created_at=when, updated_at=when, event_at=session.when,
                    project=projects.pop() if len(projects) == 1 else None,
                    domains=domains_of(text), source_session_id=session.session_id,
                    compression_source=True, importance=max(m.importance for m in current),
                    confidence=Kind.SUMMARY.default_confidence,
                    provenance=Provenance(turn_ids, {"summarized_by": by,
                                                     "compressed_from": [m.id for m in current]}),
                    content_hash=content_hash(text), embedding=vector,
                ))  # fmt: skip
                originals += [m.evolve(compressed=True) for m in current if not m.compressed]
            self.store.write([*summaries, *originals])
        return compression.CompressionReport(
            tuple(x.session_id for x in due), tuple(m.id for m in summaries), len(originals),
            tuple(by for _, by in written),
        )  # fmt: skip

    # -- feedback ------------------------------------------------------------------------------

    def feedback(
        self,
        user_id: str,
        context_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
        *,
        helpful: bool | None = None,
        score: float | None = None,
    ) -> fb.FeedbackResult:
        """Tell engrain whether injected memory helped: for a context (its id, from
        ``context()``) or for named memories, ``helpful=True/False`` or ``score`` in [0, 1].
        Each memory's usefulness moves 20% of the way to the target (``feedback.py``);
        positive feedback on a context also teaches which memories work well together (the
        gated profile's co-occurrence bonus). Unknown or expired context ids raise
        :class:`NotFoundError`; memories deleted since are skipped."""
        user_id = validate.user_id(user_id)
        context_id = validate.optional_identifier(context_id, "context_id")
        ids = [] if memory_ids is None else validate.identifiers(memory_ids)
        helpful = None if helpful is None else validate.flag(helpful, "helpful")
        score = None if score is None else validate.unit(score, "score")
        target = fb.feedback_target(helpful, score)
        if context_id is None and not ids:
            raise ValidationError("give a context_id or memory_ids")
        record = None
        if context_id is not None:
            record = self.store.get_state(user_id, fb.CONTEXTS, context_id)
            if record is None:
                raise NotFoundError(f"no context {context_id!r} for user {user_id!r} "
                                    "(unknown, or older than context_retention_days)")  # fmt: skip
            ids = list(dict.fromkeys([*record["memory_ids"], *ids]))
        with self._lock:
            found = self.store.get(user_id, ids)
            changed = [
                m.evolve(usefulness=fb.updated_usefulness(m.usefulness, target,
                                                          self.settings.feedback_rate))
                for m in found
            ]  # fmt: skip
            state = []
            learned = 0
            if record is not None and context_id is not None:
                positive = target > fb.POSITIVE and not record.get("learned")
                alive = [m.id for m in found if m.id in record["memory_ids"]]
                if positive and len(alive) > 1:
                    doc = self.store.get_state(user_id, fb.COOCCURRENCE, fb.PAIRS)
                    state.append(State(user_id, fb.COOCCURRENCE, fb.PAIRS,
                                       fb.learn_pairs(doc, alive)))  # fmt: skip
                    learned = len(alive) * (len(alive) - 1) // 2
                given = [*record.get("feedback", []), target]
                updated = {**record, "feedback": given, "learned": bool(record.get("learned"))
                           or learned > 0}  # fmt: skip
                state.append(State(user_id, fb.CONTEXTS, context_id, updated))
            self.store.write(changed, state=state)
        return fb.FeedbackResult(
            target, {m.id: (old.usefulness, m.usefulness) for old, m in zip(found, changed,
                                                                            strict=True)},
            learned,
        )  # fmt: skip

    # -- recall ----------------------------------------------------------------------------

    def recall(
        self,
        query: str,
        user_id: str,
        top_k: int | None = None,
        token_budget: int | None = None,
        memory_types: Sequence[MemoryType | str] | None = None,
        *,
        project: str | None = None,
        include_compressed: bool = False,
        now: datetime | None = None,
    ) -> RecallResult:
        """The memories to inject for ``query`` (spec section 2): the ``top_k × 4`` nearest
        candidates of this user, filtered, optionally re-ranked, procedural memories first,
        within ``token_budget`` and ``top_k``. Access counts of the selected memories grow."""
        query = validate.text(query, "query", max_chars=self.settings.max_text_chars)
        user_id = validate.user_id(user_id)
        top_k = validate.optional_integer(top_k, "top_k", minimum=1) or self.settings.top_k
        budget = validate.optional_integer(token_budget, "token_budget")
        budget = self.settings.token_budget if budget is None else budget
        types = validate.memory_types(memory_types)
        project = validate.optional_identifier(project, "project")
        include_compressed = validate.flag(include_compressed, "include_compressed")
        when = validate.moment(now, "now") or utcnow()
        vector = self.embedder.embed_query(query)
        found = cand.candidates(
            self.store, user_id, vector,
            k=top_k * self.settings.candidate_multiplier,
            min_importance=self.settings.recall_min_importance,
            memory_types=types, project=project, include_compressed=include_compressed,
        )  # fmt: skip
        if self.settings.reranker_enabled:
            ranked = rerank(query, found, self.reranker)
            sims = {m.id: s for m, s in found}
            scored = [_scored(m, sims[m.id], s) for m, s in ranked]
        else:
            scored = [_scored(m, s, s) for m, s in found]
        first = [
            _scored(m, s, s)
            for m in cand.procedural(self.store, user_id, project=project, memory_types=types)
            if m.importance >= self.settings.recall_min_importance
            for s in [_similarity(m, vector)]
        ]
        selected, used = enforce_budget(first, scored, token_budget=budget, top_k=top_k)
        self.store.record_access(user_id, [s.memory.id for s in selected], when)
        return RecallResult(
            memories=[s.memory for s in selected],
            total_tokens=used,
            budget_used=used / budget if budget else 0.0,
            scored=selected,
        )

    def context(
        self,
        message: str,
        user_id: str,
        *,
        token_budget: int | None = None,
        top_k: int | None = None,
        memory_types: Sequence[MemoryType | str] | None = None,
        project: str | None = None,
        include_compressed: bool = False,
        turn: int = 0,
        options: GateOptions | None = None,
        model: str | None = None,
        context_window: int | None = None,
        now: datetime | None = None,
    ) -> Context:
        """The memory block to inject for ``message``.

        The target model's context window (``context_window``, else ``model`` looked up in
        the registry, else the settings) picks the tier: up to 16K tokens gets the compiled
        DNA summary (tier 1), up to 64K the compiled field guide (tier 2), larger windows and
        calls naming no model the relevance-gating pipeline (tier 3). A tier 1 or 2 that is
        not compiled yet (or stale) is rebuilt in the background while tier 3 answers within
        that tier's budget (``Context.fallback``).

        Tier 3 classifies the message, sets a token budget (or uses ``token_budget``, which
        also means tier 3), scores every candidate with the configured profile, fills the
        budget greedily above the intent's threshold and renders. ``turn`` is the message's
        position in its conversation (it shifts weights and the budget); ``top_k`` caps the
        number of memories; ``options`` overrides the settings' profile, format, depth,
        speed and focus areas. Trivial messages ("thanks!") get the empty string without
        touching the store, in every tier. Every memory injected counts one use; at 10 uses
        it is promoted (tiers keep it whatever its age)."""
        start = time.perf_counter()
        request = self._request(message, user_id, token_budget, memory_types, project,
                                include_compressed, turn, options, now)  # fmt: skip
        user_id, message, project = request.user_id, request.message, request.project
        top_k = validate.optional_integer(top_k, "top_k", minimum=1)
        model = validate.optional_identifier(model, "model")
        context_window = validate.optional_integer(context_window, "context_window", minimum=1)
        when = request.now
        tier = self._tier(model, context_window, request.token_budget)
        cap = None
        if tier is not Tier.DOSSIER:
            if classify(message, turn=request.turn).complexity is Complexity.TRIVIAL:
                return self._tier_context("", tier, [], start)
            compiled = self.tier_cache.fresh(user_id, project)
            if compiled is not None:
                part = compiled.tiers[tier]
                memories = [compiled.memories[i] for i in part.memory_ids
                            if i in compiled.memories]  # fmt: skip
                context_id = new_id()
                self._count_uses(user_id, memories, when, reread=True, context_id=context_id)
                block = wrap(part.text)
                tokens = count_tokens(block) if block else 0
                return self._tier_context(block, tier, memories, start, tokens,
                                          context_id)  # fmt: skip
            cap = TIER_BUDGETS[tier]
        pairs = self.store.get_state(user_id, fb.COOCCURRENCE, fb.PAIRS)
        gated = self._gate(request, cap, (pairs or {}).get(fb.PAIRS), explain=False)
        selected = gated.selected[:top_k] if top_k is not None else gated.selected
        if top_k is not None and len(selected) < len(gated.selected):
            text = render([s.memory for s in selected], request.options.format)
            used = sum(s.tokens for s in selected)
            gated = replace(gated, selected=selected, tokens_used=used, text=text)
        context_id = new_id()
        self._count_uses(user_id, [s.memory for s in selected], when, context_id=context_id)
        if cap is not None:  # after this call's own writes, so the rebuild sees them
            self.tier_cache.schedule(user_id, project)
        budget = gated.budget.tokens
        result = RecallResult(
            memories=[s.memory for s in selected],
            total_tokens=gated.tokens_used,
            budget_used=gated.tokens_used / budget if budget else 0.0,
            scored=selected,
        )
        return Context(
            id=context_id,
            text=gated.text,
            recall=result,
            tokens=count_tokens(gated.text) if gated.text else 0,
            elapsed_ms=(time.perf_counter() - start) * 1000.0,
            gated=gated,
            fallback=cap is not None,
        )

    def _tier(self, model: str | None, window: int | None, token_budget: int | None) -> Tier:
        """The tier for this call: an explicit token budget or ``force_tier3`` means tier 3;
        else the call's window or model, else the settings' (none at all: tier 3)."""
        s = self.settings
        if token_budget is not None or s.force_tier3:
            return Tier.DOSSIER
        if window is None and model is not None:
            window = context_window(model, s.model_windows)
        if window is None:
            window = s.context_window
        if window is None and s.model is not None:
            window = context_window(s.model, s.model_windows)
        return Tier.DOSSIER if window is None else choose_tier(window)

    def _tier_context(
        self, text: str, tier: Tier, memories: builtins.list[Memory], start: float,
        tokens: int = 0, context_id: str | None = None,
    ) -> Context:  # fmt: skip
        budget = TIER_BUDGETS[tier]
        result = RecallResult(memories=memories, total_tokens=tokens,
                              budget_used=tokens / budget if budget else 0.0)  # fmt: skip
        elapsed = (time.perf_counter() - start) * 1000.0
        return Context(id=context_id or new_id(), text=text, recall=result, tokens=tokens,
                       elapsed_ms=elapsed, tier=int(tier))  # fmt: skip

    def _count_uses(
        self,
        user_id: str,
        memories: Sequence[Memory],
        when: datetime,
        *,
        reread: bool = False,
        context_id: str | None = None,
    ) -> None:
        """One use of each injected memory; those reaching 10 uses are promoted; the context
        id remembers what it injected (for feedback). ``memories`` are as the store had them
        just before (else ``reread`` fetches them after counting)."""
        if not memories:
            return
        ids = [m.id for m in memories]
        self.store.record_access(user_id, ids, when)
        if reread:
            counted = [(m, m.access_count) for m in self.store.get(user_id, ids)]
        else:
            counted = [(m, m.access_count + 1) for m in memories]
        due = [m.id for m, n in counted if m.promoted_at is None and n >= PROMOTION_USES]
        state = []
        if context_id is not None:
            record = fb.context_record(ids, when)
            state.append(State(user_id, fb.CONTEXTS, context_id, record))
        with self._lock:
            promoted = [m.evolve(promoted_at=when) for m in self.store.get(user_id, due)
                        if m.promoted_at is None]  # fmt: skip
            self.store.write(promoted, state=state)

    def tiers(
        self,
        user_id: str,
        project: str | None = None,
        *,
        rebuild: bool = False,
        now: datetime | None = None,
    ) -> TierSet:
        """Tiers 1 and 2 of the user's memories (of ``project``, or all of them): the cached
        ones when they are fresh, else (or with ``rebuild``) compiled now and cached."""
        user_id = validate.user_id(user_id)
        project = validate.optional_identifier(project, "project")
        rebuild = validate.flag(rebuild, "rebuild")
        when = validate.moment(now, "now") or utcnow()
        if not rebuild:
            fresh = self.tier_cache.fresh(user_id, project)
            if fresh is not None:
                return fresh
        return self.tier_cache.compile(user_id, project, when)

    def explain(
        self,
        message: str,
        user_id: str,
        *,
        token_budget: int | None = None,
        memory_types: Sequence[MemoryType | str] | None = None,
        project: str | None = None,
        include_compressed: bool = False,
        turn: int = 0,
        options: GateOptions | None = None,
        now: datetime | None = None,
    ) -> Gated:
        """What :meth:`context` would decide for ``message``, without counting an access:
        the classification, the budget and how it was derived, the weights, and for each
        candidate its score components, whether it was selected and why not."""
        request = self._request(message, user_id, token_budget, memory_types, project,
                                include_compressed, turn, options, now)  # fmt: skip
        pairs = self.store.get_state(request.user_id, fb.COOCCURRENCE, fb.PAIRS)
        return self._gate(request, None, (pairs or {}).get(fb.PAIRS))

    def _options(self, options: GateOptions | None) -> GateOptions:
        if options is not None:
            return options
        s = self.settings
        return GateOptions(
            profile=Profile(s.profile), format=Format(s.prompt_format), depth=Depth(s.depth),
            prioritize_speed=s.prioritize_speed, focus_areas=ensure_sequence(s.focus_areas),
            hybrid=s.hybrid, lexical_weight=s.lexical_weight, pool=s.candidate_pool,
            min_importance=s.recall_min_importance,
        )  # fmt: skip

    def _request(
        self,
        message: object,
        user_id: object,
        token_budget: object,
        memory_types: object,
        project: object,
        include_compressed: object,
        turn: object,
        options: object,
        now: object,
    ) -> _Request:
        """The arguments ``context`` and ``explain`` share, validated."""
        if options is not None and not isinstance(options, GateOptions):
            raise ValidationError(f"options must be GateOptions, not {type(options).__name__}")
        return _Request(
            message=validate.text(message, "message", max_chars=self.settings.max_text_chars),
            user_id=validate.user_id(user_id),
            token_budget=validate.optional_integer(token_budget, "token_budget"),
            memory_types=validate.memory_types(memory_types),
            project=validate.optional_identifier(project, "project"),
            include_compressed=validate.flag(include_compressed, "include_compressed"),
            turn=validate.integer(turn, "turn"),
            options=self._options(options),
            now=validate.moment(now, "now") or utcnow(),
        )

    def _gate(
        self,
        request: _Request,
        max_budget: int | None = None,
        cooccurrence: fb.Pairs | None = None,
        explain: bool = True,
    ) -> Gated:
        r = request
        return gate(
            self.store, self.embedder.embed_query, r.message, r.user_id, options=r.options,
            now=r.now, turn=r.turn, token_budget=r.token_budget, memory_types=r.memory_types,
            project=r.project, include_compressed=r.include_compressed, max_budget=max_budget,
            cooccurrence=cooccurrence, explain=explain,
        )  # fmt: skip

    # -- curation --------------------------------------------------------------------------

    def get(self, memory_id: str, user_id: str) -> Memory:
        """The user's memory with this id, or :class:`NotFoundError`."""
        memory_id = validate.identifier(memory_id, "memory_id")
        user_id = validate.user_id(user_id)
        return self._get(memory_id, user_id)

    def _get(self, memory_id: str, user_id: str) -> Memory:
        found = self.store.get(user_id, [memory_id])
        if not found:
            raise NotFoundError(f"no memory {memory_id!r} for user {user_id!r}")
        return found[0]

    def list(
        self,
        user_id: str,
        *,
        project: str | None = None,
        memory_type: MemoryType | str | None = None,
        kind: Kind | str | None = None,
        session_id: str | None = None,
        include_compressed: bool = True,
        limit: int | None = 100,
        offset: int = 0,
    ) -> builtins.list[Memory]:
        """The user's memories, most recently updated first."""
        user_id = validate.user_id(user_id)
        mtype = validate.optional_memory_type(memory_type)
        flt = MemoryFilter(
            project=validate.optional_identifier(project, "project"),
            memory_types=(mtype,) if mtype else None,
            kinds=None if kind is None else (validate.kind(kind),),
            session_id=validate.optional_identifier(session_id, "session_id"),
            include_compressed=validate.flag(include_compressed, "include_compressed"),
        )
        limit = validate.optional_integer(limit, "limit")
        offset = validate.integer(offset, "offset")
        return self.store.query(user_id, flt, limit=limit, offset=offset)

    def update(
        self, /, memory_id: str, user_id: str, *, now: datetime | None = None, **changes: Any
    ) -> Memory:
        """Change fields of a memory (content, kind, memory_type, domains, importance,
        confidence, usefulness, pinned, muted, event_at, key, project, metadata). A new
        content is re-embedded."""
        memory_id = validate.identifier(memory_id, "memory_id")
        user_id = validate.user_id(user_id)
        when = validate.moment(now, "now") or utcnow()
        fields = self._changes(changes)
        if "content" in fields:
            fields["embedding"] = self.embedder.embed([fields["content"]])[0]
        with self._lock:
            current = self._get(memory_id, user_id)  # another writer may have changed it
            if "metadata" in fields:
                meta = {**current.provenance.metadata, **fields.pop("metadata")}
                fields["provenance"] = Provenance(current.provenance.turn_ids, meta)
            updated = current.evolve(updated_at=when, **fields)
            self.store.write([updated])
        return updated

    def _changes(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """``update``'s changes, validated (``metadata`` is merged into the memory's own)."""
        unknown = set(changes) - UPDATABLE
        if unknown:
            raise ValidationError(
                f"cannot update {sorted(unknown)}; updatable: {sorted(UPDATABLE)}"
            )
        fields: dict[str, Any] = {}
        for name, value in changes.items():
            if name == "content":
                text = validate.text(value, "content", max_chars=self.settings.max_text_chars)
                text = clean_text(text)
                fields.update(content=text, content_hash=content_hash(text))
            elif name == "kind":
                fields[name] = validate.kind(value)
            elif name == "memory_type":
                fields[name] = validate.memory_type(value)
            elif name == "domains":
                fields[name] = validate.domains(value)
            elif name in ("importance", "confidence", "usefulness"):
                fields[name] = validate.unit(value, name)
            elif name in ("pinned", "muted"):
                fields[name] = validate.flag(value, name)
            elif name == "event_at":
                fields[name] = validate.moment(value, name)
            elif name in ("key", "project"):
                fields[name] = validate.optional_identifier(value, name)
            else:  # metadata
                fields[name] = validate.metadata(value)
        return fields

    def pin(self, memory_id: str, user_id: str, pinned: bool = True) -> Memory:
        """Pin (or unpin) a memory: pinned memories are injected whenever the budget allows."""
        return self.update(memory_id, user_id, pinned=validate.flag(pinned, "pinned"))

    def mute(self, memory_id: str, user_id: str, muted: bool = True) -> Memory:
        """Mute (or unmute) a memory: muted memories are never injected."""
        return self.update(memory_id, user_id, muted=validate.flag(muted, "muted"))

    def forget(self, memory_ids: str | Sequence[str], user_id: str) -> int:
        """Delete these memories of the user, atomically; returns how many existed."""
        ids = validate.identifiers(memory_ids)
        user_id = validate.user_id(user_id)
        with self._lock:
            found = self.store.get(user_id, ids)
            gone = [m.id for m in found]
            partners = {i for m in found for i in conflicts_of(m)} - set(gone)
            resolved = [unflag(m, gone) for m in self.store.get(user_id, sorted(partners))]
            doc = fb.forget_pairs(self.store.get_state(user_id, fb.COOCCURRENCE, fb.PAIRS), gone)
            state = [] if doc is None else [State(user_id, fb.COOCCURRENCE, fb.PAIRS, doc)]
            self.store.write(resolved, deletes=found, state=state)
        return len(found)

    # -- import / export -------------------------------------------------------------------

    def export_records(self, user_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every memory (of one user, or of all) as a lossless JSON-ready record, embedding
        included, in a stable order."""
        users = [validate.user_id(user_id)] if user_id is not None else self.store.users()
        for user in users:
            for memory in reversed(self.store.query(user)):
                record = memory.to_dict(with_embedding=True)
                record["embedding_model"] = self.embedder.model_id
                yield {"type": "memory", **record}

    def import_records(
        self,
        records: Iterable[Mapping[str, Any]],
        *,
        now: datetime | None = None,
        on_record: Callable[[int], None] | None = None,
    ) -> ImportResult:
        """Load records of four types: ``memory`` (an exported memory, restored as is,
        re-embedded if its vector is missing or from another model), ``state`` (an exported
        per-user state document), ``conversation`` (``user_id``, ``session_id``, ``turns``:
        the conversation path) and ``text`` (``user_id``, ``text``: the ingest path).

        Every record is validated before anything is embedded or written (a bad one raises
        :class:`ValidationError` naming its number and field), and everything is written in
        one transaction at the end: an import is all or nothing."""
        when = validate.moment(now, "now") or utcnow()
        if on_record is not None and not callable(on_record):
            raise ValidationError("on_record must be callable")
        if isinstance(records, str | bytes | Mapping) or not isinstance(records, Iterable):
            raise ValidationError("records must be an iterable of records")
        checked = [self._record(number, record) for number, record in enumerate(records, 1)]
        restored: builtins.list[Memory] = []
        states: builtins.list[State] = []
        staged: dict[str, Memory] = {}
        counts = {"stored": 0, "merged": 0, "discarded": 0}
        with self._lock:
            for number, item in enumerate(checked, 1):
                if isinstance(item, Memory):
                    restored.append(item)
                elif isinstance(item, validate.StateRecord):
                    states.append(State(item.user_id, item.namespace, item.key, item.value))
                else:
                    report = self._plan_record(item, when, staged)
                    for outcome in report.outcomes:
                        counts[outcome.action] += 1
                if on_record:
                    on_record(number)
            missing = [m for m in restored if m.embedding is None]
            if missing:
                vectors = self.embedder.embed([m.content for m in missing])
                fixed = {m.id: m.evolve(embedding=vectors[i]) for i, m in enumerate(missing)}
                restored = [fixed.get(m.id, m) for m in restored]
            self.store.write([*restored, *staged.values()], state=states)
        self._after_ingest(staged.values())
        return ImportResult(len(restored), counts["stored"], counts["merged"], counts["discarded"])

    def _record(self, number: int, record: object) -> Memory | validate.StateRecord | _Input:
        """One import record, validated (``record N: field …`` when it is not valid)."""
        try:
            if not isinstance(record, Mapping):
                raise ValidationError(f"must be a JSON object, not {type(record).__name__}")
            kind = record.get("type", "memory")
            limit = self.settings.max_text_chars
            if kind == "memory":
                return self._restore(validate.memory_record(record, max_chars=limit), record)
            if kind == "state":
                return validate.state_record(record)
            if kind not in ("conversation", "text"):
                raise ValidationError(f"type: unknown record type {kind!r}")
            conversation = kind == "conversation"
            return _Input(
                user_id=validate.user_id(record.get("user_id")),
                text=None if conversation else validate.text(record.get("text"), max_chars=limit),
                turns=self._turns(record.get("turns")) if conversation else None,
                session_id=validate.optional_identifier(record.get("session_id"), "session_id"),
                project=validate.optional_identifier(record.get("project"), "project"),
                domains=validate.domains(record.get("domains")),
                hint=validate.optional_memory_type(record.get("memory_type")),
                metadata=validate.metadata(record.get("metadata")),
            )
        except ValidationError as exc:
            raise type(exc)(f"record {number}: {exc.message}") from exc

    def _plan_record(self, item: _Input, now: datetime, staged: dict[str, Memory]) -> IngestReport:
        if item.turns is not None:
            return self._plan_conversation(item.turns, item.user_id, item.session_id,
                                           item.project, item.domains, item.hint, item.metadata,
                                           now, staged)  # fmt: skip
        assert item.text is not None
        return self._plan_text(item.text, item.user_id, item.session_id, item.hint,
                               item.project, item.domains, None, item.metadata, now,
                               staged)  # fmt: skip

    def _restore(self, memory: Memory, record: Mapping[str, Any]) -> Memory:
        """An imported memory, without its vector if another model made it."""
        model = record.get("embedding_model")
        if memory.embedding is not None and (
            (model and model != self.embedder.model_id)
            or memory.embedding.shape != (self.embedder.dim,)
        ):
            memory = memory.evolve(embedding=None)
        return memory


@dataclass(frozen=True)
class _Request:
    """The validated arguments of ``context`` and ``explain``."""

    message: str
    user_id: str
    token_budget: int | None
    memory_types: builtins.list[MemoryType] | None
    project: str | None
    include_compressed: bool
    turn: int
    options: GateOptions
    now: datetime


@dataclass(frozen=True)
class _Input:
    """A validated ``conversation`` (``turns``) or ``text`` import record."""

    user_id: str
    text: str | None
    turns: builtins.list[Turn] | None
    session_id: str | None
    project: str | None
    domains: tuple[str, ...]
    hint: MemoryType | None
    metadata: dict[str, Any]


def _similarity(memory: Memory, vector: Vector) -> float:
    if memory.embedding is None:
        return 0.0
    return float(np.dot(memory.embedding, vector))


def _scored(memory: Memory, similarity: float, score: float) -> ScoredMemory:
    return ScoredMemory(memory, score, similarity, count_tokens(memory.content))


def _merge(
    existing: Memory,
    text: str,
    vector: Vector,
    now: datetime,
    turn_ids: tuple[str, ...],
    event_at: datetime | None,
    meta: Mapping[str, Any],
) -> Memory:
    """ADR-002: the near-duplicate's content and timestamp are updated. The text it had is
    kept in its provenance, so nothing is lost."""
    history = list(existing.provenance.metadata.get("history", []))
    if existing.content != text:
        history.append({"content": existing.content, "updated_at": existing.updated_at.isoformat()})
    metadata = {**existing.provenance.metadata, **meta}
    if history:
        metadata["history"] = history
    provenance = Provenance(tuple(dict.fromkeys(existing.provenance.turn_ids + turn_ids)), metadata)
    return existing.evolve(
        content=text,
        content_hash=content_hash(text),
        embedding=vector,
        updated_at=now,
        event_at=as_utc(event_at) if event_at else existing.event_at,
        provenance=provenance,
    )


# -- async twin --------------------------------------------------------------------------------


def _threaded(
    method: Callable[Concatenate[Engine, P], R],
) -> Callable[Concatenate[AsyncEngine, P], Awaitable[R]]:
    """The async twin of an Engine method: the same call, run in a worker thread."""

    async def run(self: AsyncEngine, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    functools.update_wrapper(run, method)
    return run


class AsyncEngine:
    """The async twin of :class:`Engine`: the same methods and arguments, awaitable. Blocking
    work (embedding, SQLite) runs in worker threads so the event loop never stalls."""

    def __init__(
        self,
        url: str | None = None,
        *,
        settings: Settings | None = None,
        store: Store | None = None,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.sync = Engine(url, settings=settings, store=store, embedder=embedder,
                           reranker=reranker)  # fmt: skip

    async def __aenter__(self) -> AsyncEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    close = _threaded(Engine.close)
    ingest = _threaded(Engine.ingest)
    ingest_conversation = _threaded(Engine.ingest_conversation)
    remember = _threaded(Engine.remember)
    recall = _threaded(Engine.recall)
    context = _threaded(Engine.context)
    explain = _threaded(Engine.explain)
    get = _threaded(Engine.get)
    list = _threaded(Engine.list)
    update = _threaded(Engine.update)
    pin = _threaded(Engine.pin)
    mute = _threaded(Engine.mute)
    forget = _threaded(Engine.forget)
    import_records = _threaded(Engine.import_records)
    tiers = _threaded(Engine.tiers)
    compress = _threaded(Engine.compress)
    feedback = _threaded(Engine.feedback)
    wait = _threaded(Engine.wait)

    async def export_records(self, user_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Every memory as lossless records (a list: the export runs in one worker call)."""
        return await asyncio.to_thread(lambda: list(self.sync.export_records(user_id)))
