"""The public facade: :class:`Engine` (sync) and :class:`AsyncEngine` (async), same methods.

Each method validates all its arguments (``validate.py``) before any read or write, makes
one call into the stage that owns the work (``ingest/plan.py``, ``relate.py``,
``compress.py``, ``feedback.py``, ``recall/``, ``tiers/``) and writes its result through
the store in one transaction. Changes of existing memories are field-level patches, so a
concurrent change of another field is kept and a forgotten memory is never written back.
The engine's lock guards only read-plan-write sequences against this process's other
threads (dedup on ingest, the co-occurrence document on forget), never embedding or an LLM
call. Every time computation takes ``now`` (default: the wall clock).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from engrain import activity, curate, forgotten, lifecycle, relate, validate
from engrain import browse as browsing
from engrain import compress as compression
from engrain import feedback as fb
from engrain import records as record_io
from engrain import review as review_queue
from engrain.background import Worker
from engrain.config import Settings, load_settings
from engrain.curate import UPDATABLE
from engrain.embed import CachedEmbedder, Embedder, make_embedder
from engrain.errors import KeyChangedError, NotFoundError, StoreError, ValidationError
from engrain.ingest import sessions as many
from engrain.ingest.plan import Draft, Item, Origin, Planner, Staged, checked_turns
from engrain.lifecycle import CallGate, admitted
from engrain.llm import make_llm
from engrain.model import (
    IngestReport,
    Kind,
    Memory,
    MemoryType,
    Outcome,
    Turn,
    new_id,
    utcnow,
)
from engrain.preview import Preview, served
from engrain.recall import Reranker, spec, uses
from engrain.recall.classify import Complexity, classify
from engrain.recall.gate import GateOptions, gate
from engrain.recall.request import Request, gated_context, tier_context, tier_for
from engrain.recall.results import Context, Gated, RecallResult
from engrain.recall.word_backlog import WordBacklog
from engrain.review import FlaggedPair, Resolution, Resolved
from engrain.store import MemoryFilter, Store, open_store, reads
from engrain.store.base import Patch
from engrain.tiers import TIER_BUDGETS, Tier, TierCache, TierSet
from engrain.tiers.cache import wrap
from engrain.tokens import count_tokens

__all__ = ["UPDATABLE", "Engine", "ImportResult"]

T = TypeVar("T")
log = logging.getLogger(__name__)
#: Plans of one call written at most this many times when other engines keep changing a
#: key it looks up (``Engine._planned``); each failed attempt means one of theirs committed.
KEY_ATTEMPTS = 8


@dataclass(frozen=True)
class ImportResult:
    """What ``Engine.import_records`` did: memories restored, and ingest outcomes."""

    memories: int
    stored: int
    merged: int
    discarded: int
    states: int = 0


def _model_spinning(settings: Settings, store: Store) -> bool:
    """``onnx_spinning`` as set, else on unless ``store`` reads in threads of its own (the
    PostgreSQL store), whose reads the model's spinning threads would keep from the cores."""
    if settings.onnx_spinning is not None:
        return settings.onnx_spinning
    return not reads.concurrent(store)


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
        # the settings checked before the store opens: a bad one opens (and creates) nothing
        self.llm = make_llm(settings.llm_url, settings.llm_model, settings.llm_api_key,
                            timeout=settings.llm_timeout, retries=settings.llm_retries)  # fmt: skip
        self.options = GateOptions.from_settings(settings)  # context()'s unless a call's own
        self.store: Store = store if store is not None else open_store(settings.store_url)
        try:
            raw = embedder or make_embedder(
                settings.embedder,
                threads=settings.onnx_threads,
                spinning=_model_spinning(settings, self.store),
                split=settings.onnx_split,
                int8=settings.onnx_int8,
            )
        except BaseException:
            if store is None:  # the store this engine opened is not left open (its threads)
                self.store.close()
            raise
        self.embedder = CachedEmbedder(raw, self.store)
        self.reranker = reranker
        self.worker = Worker()
        self.tier_cache = TierCache(
            self.store, self.llm.complete if self.llm else None, worker=self.worker
        )
        self.planner = Planner(self.store, self.embedder, settings)
        self.word_backlog = WordBacklog(self.embedder.model_id, self.embedder.embed)
        self._lock = threading.RLock()  # read-plan-write sequences of this process
        # the calls in flight, which close() waits for; a store that holds what it loads
        # for later calls begins those loads once a call has answered (PostgreSQL's)
        self.gate = CallGate(around=getattr(self.store, "answering", None))

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new calls (``StoreError``), wait up to ``lifecycle.CLOSE_WAIT`` seconds for
        the calls in flight, finish background work (tier compilation, compression), stop
        the engine's threads, then close the store (``lifecycle.py`` states the rule)."""
        running = self.gate.close()
        if running:
            log.warning("closing with %d call(s) still running after %.0f s: they will fail "
                        "with nothing written", running, lifecycle.CLOSE_WAIT)  # fmt: skip
        self.worker.close()
        self.planner.close()
        self.store.close()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background work scheduled so far (tier compilation, automatic
        compression) is done, or ``timeout`` seconds have passed (``None``: no bound);
        whether it is done."""
        return self.worker.wait(timeout)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ingestion -------------------------------------------------------------------------

    @admitted
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
        text = self._text(text, "text")
        origin = Origin.checked(user_id, session_id, project, domains, memory_type_hint, metadata,
                                max_chars=self.settings.max_text_chars)  # fmt: skip
        event_at = validate.moment(event_at, "event_at")
        when = validate.moment(now, "now") or utcnow()
        drafts = self.planner.text_drafts(text, event_at)
        report, staged = self._planned(lambda st: self.planner.plan(drafts, origin, when, st))
        self._after_ingest(staged, when)
        return report

    @admitted
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
        parsed = checked_turns(turns, self.settings.max_text_chars)
        origin = Origin.checked(user_id, session_id, project, domains, memory_type_hint, metadata,
                                max_chars=self.settings.max_text_chars)  # fmt: skip
        when = validate.moment(now, "now") or utcnow()
        drafts = self.planner.conversation_drafts(parsed)
        report, staged = self._planned(
            lambda st: self.planner.conversation(drafts, origin, when, st)
        )
        self._after_ingest(staged, when)
        return report

    @admitted
    def ingest_conversations(
        self, sessions: Sequence[Mapping[str, Any]]
    ) -> builtins.list[IngestReport]:
        """Store several sessions in order, each exactly as ``ingest_conversation(**session)``
        would (same decisions, its own transaction, after the previous session's), the next
        session chunked and embedded while this one is planned and written. Where the model
        already keeps every core busy this is no faster than one call per session (LoCoMo
        dev on 2 cores: 344.1 against 344.8 turns/s); it frees the calling thread.

        Each session is a mapping with ``ingest_conversation``'s parameters as keys
        (``turns`` and ``user_id`` required). Every session is validated before anything is
        written: a malformed one refuses the call. A later failure (the model, the store)
        raises after the sessions before the failing one were stored, each whole; nothing
        of the failing session or the ones after it is written (the error's note says how
        many were stored). The reports are in the order of ``sessions``."""
        parsed = many.checked_sessions(sessions, self.settings.max_text_chars)

        def store(drafts: builtins.list[Draft], session: many.Session) -> IngestReport:
            when = session.now or utcnow()
            report, staged = self._planned(
                lambda st: self.planner.conversation(drafts, session.origin, when, st)
            )
            self._after_ingest(staged, when)
            return report

        return many.pipelined(parsed, self.planner.conversation_drafts, store)

    @admitted
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
        muted: bool = False,
        access_count: int = 0,
        session_id: str | None = None,
        event_at: datetime | None = None,
        corrects: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> Outcome:
        """Store one typed item as given (the learning path): no chunking, no importance
        discard. A near-duplicate of a recent memory of the same kind (or, for procedural
        memories, the memory with the same key) is updated instead. ``access_count`` carries
        usage counted elsewhere (an import of a project's history), ``muted`` stores the
        item without ever injecting it.

        ``corrects=id`` supersedes that memory with this one, whatever its kind (a new
        decision supersedes an old decision and stays a decision); a ``correction`` without
        ``corrects`` supersedes the nearest active memory at least ``correction_similarity``
        close. The old memory is kept and linked, and never injected again. A new fact,
        preference, decision, rule or context that disagrees with a close active memory is
        stored and both are flagged as conflicting (``Outcome.reason`` says which); they are
        then injected together."""
        item = Item.checked(
            content, kind, max_chars=self.settings.max_text_chars, memory_type=memory_type,
            key=key, confidence=confidence, importance=importance, pinned=pinned, muted=muted,
            access_count=access_count, event_at=event_at, corrects=corrects,
        )  # fmt: skip
        origin = Origin.checked(user_id, session_id, project, domains, None, metadata,
                                max_chars=self.settings.max_text_chars)  # fmt: skip
        when = validate.moment(now, "now") or utcnow()
        vector = self.embedder.embed([item.text])[0]
        outcome, staged = self._planned(
            lambda st: self.planner.item(item, origin, vector, when, st)
        )
        self._after_ingest(staged, when)
        return outcome

    def _planned(self, plan: Callable[[Staged], T]) -> tuple[T, Staged]:
        """``plan`` into a new :class:`Staged` under the lock, written with its key claims;
        planned afresh when another engine changed a key it looked up meanwhile
        (:class:`KeyChangedError`: that write committed, so each retry sees progress), up
        to :data:`KEY_ATTEMPTS` times."""
        for attempt in range(KEY_ATTEMPTS):
            staged = Staged()
            with self._lock:
                result = plan(staged)
                try:
                    self._write(staged)
                except KeyChangedError:
                    if attempt == KEY_ATTEMPTS - 1:
                        raise
                    continue
            return result, staged
        raise AssertionError("unreachable")

    def _write(self, staged: Staged) -> None:
        """One transaction: ``staged``'s new memories and patches, its claims checked."""
        self.store.write(staged.upserts, patches=staged.patches, claims=staged.claims)

    def _after_ingest(
        self, staged: Staged, when: datetime, restored: Iterable[Memory] = ()
    ) -> None:
        """Schedule the compression check of each user who got a new episodic memory (in
        the background: the ingest call never waits for it) as of the call's ``when`` (a
        replayed history compresses with its own time, as its tiers compile with it), and
        the vectors of the new conversation chunks' words when soft terms run them through
        the model (``recall.word_backlog``). ``restored`` (an import's exported memories,
        written as they were) are not new: an export imported is not compressed behind its
        back."""
        old = {m.id for m in restored}
        memories = [m for m in staged.memories.values() if m.id not in old]
        # the default (soft terms off) and a model with a word table: nothing queued
        backlog = self.word_backlog
        if backlog.wanted(self.options.soft_terms) and backlog.add_chunks(memories):
            self.worker.submit(("words",), self.word_backlog.drain)
        if not self.settings.auto_compress:
            return
        users = {m.user_id for m in memories if m.memory_type is MemoryType.EPISODIC}
        for user in users:
            self.worker.submit(("compress", user),
                               functools.partial(self._compress, user, now=when))  # fmt: skip

    # -- compression -------------------------------------------------------------------------

    @admitted
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
        return self._compress(user_id, force=force, now=now)

    def _compress(
        self, user_id: str, *, force: bool = False, now: datetime | None = None
    ) -> compression.CompressionReport:
        """:meth:`compress` without the gate: the background job's, which ``close()``
        finishes after the gate is shut (``Worker.close``)."""
        user_id = validate.user_id(user_id)
        force = validate.flag(force, "force")
        when = validate.moment(now, "now") or utcnow()
        s = self.settings
        plan = compression.compress(
            self.store, self.embedder.embed, self.llm.complete if self.llm else None, user_id,
            threshold=s.compression_threshold, count=s.sessions_to_compress, force=force,
            now=when,
        )  # fmt: skip
        if plan.summaries:
            self.store.write(plan.summaries, patches=plan.patches)
            # a source forgotten after the plan read it: its summary must not outlive it
            if self.settings.forget_summaries:
                with self._lock:
                    lost = forgotten.orphaned(self.store, user_id, plan.summaries)
                    if lost:
                        self._forget(user_id, [], lost)
        # last: a compression that fails (the model, the LLM) has dropped nothing before
        self._expire_contexts(user_id, when, after_writes=bool(plan.summaries))
        return plan.report

    def _expire_contexts(self, user_id: str, when: datetime, *, after_writes: bool) -> None:
        """:func:`feedback.expire` the user's context records; after the compression's own
        writes a failure is logged, not raised (the call's work is stored; the next
        compression drops them)."""
        try:
            fb.expire(self.store, user_id, when, self.settings.context_retention_days)
        except StoreError as exc:
            if not after_writes:
                raise
            log.warning("user %r: context records past their retention not dropped (%s); "
                        "the next compression drops them", user_id, exc)  # fmt: skip

    # -- feedback ------------------------------------------------------------------------------

    @admitted
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
        target = fb.feedback_target(
            None if helpful is None else validate.flag(helpful, "helpful"),
            None if score is None else validate.unit(score, "score"),
        )
        if context_id is None and not ids:
            raise ValidationError("context_id: give a context_id or memory_ids")
        with self._lock:  # the co-occurrence and context documents are read, then rewritten
            plan = fb.plan(self.store, user_id, context_id, ids, target,
                           self.settings.feedback_rate)  # fmt: skip
            self.store.write(patches=plan.patches, state=plan.state)
        return plan.result

    # -- recall ----------------------------------------------------------------------------

    @admitted
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
        s = self.settings
        query = self._text(query, "query")
        user_id = validate.user_id(user_id)
        top_k = validate.optional_integer(top_k, "top_k", minimum=1) or s.top_k
        budget = validate.optional_integer(token_budget, "token_budget")
        types = validate.memory_types(memory_types)
        project = validate.optional_identifier(project, "project")
        include_compressed = validate.flag(include_compressed, "include_compressed")
        when = validate.moment(now, "now") or utcnow()
        result = spec.recall(
            self.store, self.embedder.embed_query, query, user_id, top_k=top_k,
            token_budget=s.token_budget if budget is None else budget,
            candidate_multiplier=s.candidate_multiplier, min_importance=s.recall_min_importance,
            memory_types=types, project=project, include_compressed=include_compressed,
            reranker=self.reranker, use_reranker=s.reranker_enabled,
        )  # fmt: skip
        self.store.record_access(user_id, [m.id for m in result.memories], when)
        return result

    @admitted
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
        previous: str | None = None,
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
        it is promoted (tiers keep it whatever its age).

        ``previous`` is the conversation's turn before ``message`` as the caller has it: a
        continuation ("and the refresh ones?") or a short follow-up pointing back ("what's
        its URL?") is searched with it too, a self-contained message is answered as without
        it (``recall/previous.py``). It is validated like ``message`` and never stored."""
        start = time.perf_counter()
        r = self._request(message, user_id, token_budget=token_budget, top_k=top_k,
                          memory_types=memory_types, project=project,
                          include_compressed=include_compressed, turn=turn, options=options,
                          model=model, context_window=context_window, now=now,
                          previous=previous)  # fmt: skip
        return self._answer(r, start)

    def _answer(self, r: Request, start: float) -> Context:
        """The context of a validated request: tier 3 answers for a window that calls for
        it; tier 1 or 2 from its compiled block, else (not compiled yet, or stale) from the
        gating pipeline within the tier's budget; a trivial message gets the empty block."""
        tier, cap = self._tier(r)
        if cap is None:
            return self._gated_context(r, None, start)
        if classify(r.message, turn=r.turn).complexity is Complexity.TRIVIAL:
            return tier_context("", tier, [], start, context_id=new_id())
        compiled = self.tier_cache.fresh(r.user_id, r.project)
        if compiled is None:
            return self._gated_context(r, cap, start)
        return self._compiled_context(r, compiled, tier, start)

    def _tier(self, r: Request) -> tuple[Tier, int | None]:
        """The tier the request's model calls for and its budget (``None``: tier 3)."""
        tier = tier_for(self.settings, r.model, r.window, r.token_budget)
        return tier, None if tier is Tier.DOSSIER else TIER_BUDGETS[tier]

    def _compiled_context(self, r: Request, compiled: TierSet, tier: Tier, start: float) -> Context:
        """The context of a compiled tier's block; its memories count one use each."""
        part = compiled.tiers[tier]
        memories = [compiled.memories[i] for i in part.memory_ids if i in compiled.memories]
        context_id = new_id()
        self._count_uses(r.user_id, memories, r.now, context_id, reread=True)
        block = wrap(part.text)
        return tier_context(block, tier, memories, start, count_tokens(block) if block else 0,
                            context_id)  # fmt: skip

    def _gated_context(self, r: Request, cap: int | None, start: float) -> Context:
        """The context of the gating pipeline (within ``cap``, a tier's budget, when that
        tier is not compiled: then compiled in the background); its memories count one use
        each."""
        gated = self._gate(r, cap, explain=False)
        context_id = new_id()
        self._count_uses(r.user_id, gated.memories, r.now, context_id)
        if cap is not None:  # after this call's own writes, so the rebuild sees them
            self.tier_cache.schedule(r.user_id, r.project, r.now)
        return gated_context(gated, context_id, start, fallback=cap is not None)

    def _count_uses(
        self,
        user_id: str,
        memories: Sequence[Memory],
        when: datetime,
        context_id: str,
        *,
        reread: bool = False,
    ) -> None:
        """One use of each injected memory, its promotions and the context's record."""
        patches = uses.count(self.store, user_id, memories, when, reread=reread,
                             context_id=context_id)  # fmt: skip
        if patches:
            self.store.write(patches=patches)

    @admitted
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

    @admitted
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
        previous: str | None = None,
    ) -> Gated:
        """What :meth:`context` would decide for ``message``, without counting an access:
        the classification, the budget and how it was derived, the weights, and for each
        candidate its score components, whether it was selected and why not. With
        ``previous`` (as for :meth:`context`), the classification's signals say whether the
        turn before was used, and why."""
        request = self._request(message, user_id, token_budget=token_budget,
                                memory_types=memory_types, project=project,
                                include_compressed=include_compressed, turn=turn,
                                options=options, now=now, previous=previous)  # fmt: skip
        return self._gate(request, None)

    @admitted
    def preview(
        self,
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
    ) -> Preview:
        """What :meth:`context` would return for ``message`` (the tier the model calls for,
        the exact block, the memories it holds) with the gating pipeline's explanation,
        without writing anything: no use is counted, no context recorded, no tier compiled
        (``preview.py``). ``previous`` as for :meth:`context`."""
        r = self._request(message, user_id, token_budget=token_budget, project=project,
                          model=model, context_window=context_window, turn=turn, now=now,
                          previous=previous)  # fmt: skip
        tier, cap = self._tier(r)
        compiled = None if cap is None else self.tier_cache.fresh(r.user_id, r.project)
        return served(tier, self._gate(r, cap), compiled)

    def _request(self, message: object, user_id: object, **fields: Any) -> Request:
        """The arguments of ``context``, ``explain`` or ``preview``, validated."""
        return Request.checked(message, user_id, defaults=self.options,
                               max_chars=self.settings.max_text_chars, **fields)  # fmt: skip

    def _gate(self, r: Request, max_budget: int | None, *, explain: bool = True) -> Gated:
        """The gating pipeline for ``r`` (``max_budget``: a tier's budget)."""
        user_id, store = r.user_id, self.store
        pairs = reads.Reads(store).start(  # read lazily on a serial store: one small read
            lambda: store.get_state(user_id, fb.COOCCURRENCE, fb.PAIRS)
        )
        return gate(
            self.store, self.embedder.embed_query, r.message, r.user_id, options=r.options,
            now=r.now, turn=r.turn, token_budget=r.token_budget, memory_types=r.memory_types,
            project=r.project, include_compressed=r.include_compressed, max_budget=max_budget,
            cooccurrence=fb.StartedPairs(pairs), explain=explain, top_k=r.top_k,
            previous=r.previous, reads=self._reads(),
        )  # fmt: skip

    def _reads(self) -> reads.Reads:
        """How a ``context()``'s reads and its searches' second walk run (the settings)."""
        s = self.settings
        return reads.Reads(self.store, overlap=s.overlap_reads, walks=s.overlap_walks)

    # -- curation --------------------------------------------------------------------------

    @admitted
    def get(self, memory_id: str, user_id: str) -> Memory:
        """The user's memory with this id, or :class:`NotFoundError`."""
        memory_id = validate.identifier(memory_id, "memory_id")
        return self._get(memory_id, validate.user_id(user_id))

    def _get(self, memory_id: str, user_id: str) -> Memory:
        found = self.store.get(user_id, [memory_id])
        if not found:
            raise NotFoundError(f"no memory {memory_id!r} for user {user_id!r}")
        return found[0]

    @admitted
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

    @admitted
    def update(
        self, /, memory_id: str, user_id: str, *, now: datetime | None = None, **changes: Any
    ) -> Memory:
        """Change fields of a memory (content, kind, memory_type, domains, importance,
        confidence, usefulness, pinned, muted, event_at, key, project, metadata). A new
        content is re-embedded. A change of what the memory says sets its ``updated_at`` to
        ``now``; flags alone (pinned, muted, usefulness) leave its time as it is. Only the
        named fields are written (a concurrent change of another field is kept); a memory
        forgotten meanwhile stays forgotten (:class:`NotFoundError`)."""
        memory_id = validate.identifier(memory_id, "memory_id")
        user_id = validate.user_id(user_id)
        when = validate.moment(now, "now") or utcnow()
        fields = curate.changes(changes, max_chars=self.settings.max_text_chars)
        if "content" in fields:
            fields["embedding"] = self.embedder.embed([fields["content"]])[0]
        meta = fields.pop("metadata", None)
        # merging metadata reads the memory's own: guard that read-write against our threads
        with self._lock if meta is not None else contextlib.nullcontext():
            current = self._get(memory_id, user_id)  # NotFoundError before any write
            if meta is not None:
                fields["provenance"] = curate.merged_metadata(current, meta)
            self.store.write(patches=[Patch(user_id, memory_id, curate.stamped(fields, when))])
        return self._get(memory_id, user_id)

    @admitted
    def pin(
        self, memory_id: str, user_id: str, pinned: bool = True, *, now: datetime | None = None
    ) -> Memory:
        """Pin (or unpin) a memory: pinned memories are injected whenever the budget allows.
        A flag, not an edit: the memory keeps its time (and so its recency)."""
        return self.update(memory_id, user_id, pinned=validate.flag(pinned, "pinned"), now=now)

    @admitted
    def mute(
        self, memory_id: str, user_id: str, muted: bool = True, *, now: datetime | None = None
    ) -> Memory:
        """Mute (or unmute) a memory: muted memories are never injected. A flag, not an
        edit: the memory keeps its time."""
        return self.update(memory_id, user_id, muted=validate.flag(muted, "muted"), now=now)

    @admitted
    def forget(self, memory_ids: str | Sequence[str], user_id: str) -> int:
        """Delete these memories of the user, atomically; returns how many existed. Their
        conflict partners are unflagged and their learned co-occurrence dropped. A stored
        tier set holding one goes too, and with ``Settings.forget_summaries`` a session
        summary written from one of them (the session's other memories are then no longer
        compressed; ``forgotten.py``)."""
        ids = validate.identifiers(memory_ids)
        user_id = validate.user_id(user_id)
        with self._lock:
            found = self.store.get(user_id, ids)
            summaries = self.settings.forget_summaries
            made = forgotten.made_from(self.store, user_id, found, summaries_too=summaries)
            self._forget(user_id, found, made)
            # a summary or tier set committed by another process since that read
            late = forgotten.made_from(self.store, user_id, found, summaries_too=summaries)
            if late:
                self._forget(user_id, [], late)
        return len(found)

    def _forget(self, user_id: str, found: Sequence[Memory], made: forgotten.Derived) -> None:
        """One transaction: ``found`` and what was made from them (``forgotten.py``)
        deleted, their conflict partners unflagged, their co-occurrence dropped."""
        gone = [*found, *made.deletes]
        state = fb.unlearned(self.store, user_id, [m.id for m in gone])
        resolved = relate.resolve(self.store, user_id, gone)
        self.store.write(deletes=gone, state=[*state, *made.state],
                         patches=[*resolved, *made.patches])  # fmt: skip

    @admitted
    def browse(
        self,
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
    ) -> browsing.Page:
        """A page of the user's memories for people to look through (the inspector's
        table, ``browse.py``): ``text`` searches (BM25, best first); the filters narrow
        (``None`` is any; ``True``/``False`` for only those / none of those; ``projects``
        limits to these projects); ``sort`` is updated, used, importance or relevance;
        ``cursor`` is the previous page's ``next_cursor``. Reads only."""
        user_id = validate.user_id(user_id)
        request = browsing.Browse.checked(
            text=text, memory_types=memory_types, kinds=kinds, domain=domain, project=project,
            pinned=pinned, muted=muted, superseded=superseded, conflicting=conflicting,
            sort=sort, limit=limit, cursor=cursor, projects=projects,
            max_chars=self.settings.max_text_chars,
        )  # fmt: skip
        return browsing.browse(self.store, user_id, request)

    @admitted
    def relations(self, memory_id: str, user_id: str) -> browsing.Relations:
        """The memory's conflicts, the memories it corrected and the one correcting it."""
        return browsing.relations(self.store, self.get(memory_id, user_id))

    @admitted
    def review(
        self, user_id: str, *, project: str | None = None, limit: int | None = 50
    ) -> builtins.list[FlaggedPair]:
        """The review queue (``review.py``): pairs of the user's active memories flagged as
        conflicting, newest first, then near-duplicates ingestion did not merge, closest
        first; at most ``limit`` pairs. Reads only."""
        user_id = validate.user_id(user_id)
        project = validate.optional_identifier(project, "project")
        limit = validate.optional_integer(limit, "limit", minimum=1)
        return review_queue.queue(self.store, user_id, project, limit=limit)

    @admitted
    def resolve(
        self,
        memory_id: str,
        other_id: str,
        user_id: str,
        resolution: Resolution | str,
        *,
        now: datetime | None = None,
    ) -> Resolved:
        """Resolve a reviewed pair in one transaction: ``keep`` the first and forget the
        other, the first ``correct``s (supersedes) the other, or keep ``both`` (their flags
        on each other are cleared and the pair is not queued again). A kept memory the
        other superseded comes back; one a third memory superseded is refused. The pair as
        planned is checked by the write: another engine resolving (or forgetting, or
        superseding) it meanwhile has the call planned again, and refused as it would be
        after that call (:class:`NotFoundError`, :class:`ValidationError`)."""
        memory_id = validate.identifier(memory_id, "memory_id")
        other_id = validate.identifier(other_id, "other_id")
        user_id = validate.user_id(user_id)
        action = Resolution.parse(resolution)
        when = validate.moment(now, "now") or utcnow()
        for attempt in range(KEY_ATTEMPTS):
            with self._lock:  # the memories and the co-occurrence document are read, then written
                plan = review_queue.plan(self.store, user_id, memory_id, other_id, action, when)
                try:
                    self.store.write(deletes=plan.deletes, state=plan.state,
                                     patches=plan.patches, claims=plan.claims)  # fmt: skip
                except KeyChangedError:  # another engine changed the pair: plan it again
                    if attempt == KEY_ATTEMPTS - 1:
                        raise
                    continue
            return plan.result
        raise AssertionError("unreachable")

    @admitted
    def contexts(
        self, user_id: str, *, project: str | None = None, limit: int = 20
    ) -> builtins.list[activity.ContextRecord]:
        """The user's most recent recorded contexts (those that injected memories), newest
        first: when, the memories injected (those still stored) and the feedback given.
        With ``project``, only contexts whose memories all belong to it. Reads only."""
        user_id = validate.user_id(user_id)
        project = validate.optional_identifier(project, "project")
        limit = validate.integer(limit, "limit", minimum=1)
        return activity.recent(self.store, user_id, project=project, limit=limit)

    # -- import / export -------------------------------------------------------------------

    @admitted
    def users(self) -> builtins.list[str]:
        """Every user id with at least one memory in the store."""
        return self.store.users()

    @admitted
    def export_records(self, user_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every memory (of one user, or of all) as a lossless JSON-ready record, embedding
        included, oldest first; each user's first record also carries ``state``: every
        state document the engine learned for them (co-occurrence, context records). Every
        record is a memory, so readers of the memory format keep working. Compiled tiers are
        a cache and are rebuilt instead (``records.py``). Export → import → export gives the
        same bytes, and ``context()`` answers the same after."""
        users = [validate.user_id(user_id)] if user_id is not None else self.store.users()
        return record_io.export(self.store, users, self.embedder.model_id)

    @admitted
    def import_records(
        self,
        records: Iterable[Mapping[str, Any]],
        *,
        now: datetime | None = None,
        on_record: Callable[[int], None] | None = None,
    ) -> ImportResult:
        """Load records of five types: ``memory`` (an exported memory, restored as is,
        re-embedded if its vector is missing or from another model, with the learned
        ``state`` it carries), ``state`` (one per-user state document), ``conversation``
        (``user_id``, ``session_id``, ``turns``: the conversation path), ``text``
        (``user_id``, ``text``: the ingest path) and ``remember`` (``user_id``, ``content``
        and :meth:`remember`'s other arguments, usage, pins and mutes included, with ``at``
        for its time: a hand-written memory, see ``records.py``).

        Every record is validated before anything is embedded or written (a bad one raises
        :class:`ValidationError` naming its number and field), and everything is written in
        one transaction at the end: an import is all or nothing."""
        when = validate.moment(now, "now") or utcnow()
        if on_record is not None and not callable(on_record):
            raise ValidationError("on_record must be callable")
        if isinstance(records, str | bytes | Mapping) or not isinstance(records, Iterable):
            raise ValidationError("records must be an iterable of records")
        batch = record_io.prepare(records, self.planner, self.embedder,
                                  max_chars=self.settings.max_text_chars)  # fmt: skip
        staged = Staged()
        with self._lock:
            counts = record_io.plan(batch, self.planner, when, staged, on_record)
            self.store.write(staged.upserts, state=batch.states, patches=staged.patches,
                             claims=staged.claims)  # fmt: skip
        self._after_ingest(staged, when, batch.memories)
        return ImportResult(len(batch.memories), counts["stored"], counts["merged"],
                            counts["discarded"], len(batch.states))  # fmt: skip

    def _text(self, value: object, field: str) -> str:
        return validate.text(value, field, max_chars=self.settings.max_text_chars)
