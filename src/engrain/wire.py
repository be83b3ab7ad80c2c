"""JSON forms of engrain's result types, both directions: what the HTTP server sends and
what :mod:`engrain.client` rebuilds, so a caller gets the same types from a server as from
an embedded :class:`~engrain.engine.Engine`.

Each ``dump_*`` returns a JSON-ready dict (the shapes ``engrain.server.models`` declares
in the OpenAPI document); each ``load_*`` is its inverse. Memories travel without their
embedding (``Memory.embedding`` is ``None`` on the client side): vectors are the store's
business and would multiply the size of every answer. Errors travel as
:meth:`EngrainError.to_dict` and come back as the same class (:func:`load_error`).

This module imports only the core: no web framework, no HTTP client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

from engrain import errors
from engrain.activity import ContextRecord
from engrain.browse import Page, Relations, Sort
from engrain.engine import ImportResult
from engrain.feedback import FeedbackResult
from engrain.model import IngestReport, Memory, MemoryType, Outcome, as_utc
from engrain.preview import Preview
from engrain.recall.budget import Budget
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.results import Context, Decision, Gated, RecallResult, ScoredMemory
from engrain.review import FlaggedPair, Resolution, Resolved
from engrain.tiers import Tier, TierSet
from engrain.tiers.compile import CompiledTier

JSON = dict[str, Any]

# -- memories and ingest ------------------------------------------------------------------


def path_segment(memory_id: str) -> str:
    """An id as one segment of a URL path (``/v1/memories/{id}``, ``/ui/memories/{id}``):
    every character but letters, digits and ``_.-~`` percent-encoded, so a ``/``, ``?`` or
    ``#`` in an id (import takes any id) never makes the URL name another route, a query
    or a fragment; an id of dots only is spelled ``%2E`` so that HTTP clients do not
    remove it as a ``.`` or ``..`` segment (browsers still do: such a memory is reached
    through the API and the lists, not the inspector's page)."""
    quoted = quote(memory_id, safe="")
    return quoted.replace(".", "%2E") if set(quoted) == {"."} else quoted


def dump_memory(memory: Memory) -> JSON:
    """A memory as JSON (every field but the embedding)."""
    return memory.to_dict()


def load_memory(data: Mapping[str, Any]) -> Memory:
    """Inverse of :func:`dump_memory`."""
    return Memory.from_dict({k: v for k, v in data.items() if k != "embedding"})


def dump_outcome(outcome: Outcome) -> JSON:
    """What happened to one piece of input."""
    return outcome.to_dict()


def load_outcome(data: Mapping[str, Any]) -> Outcome:
    """Inverse of :func:`dump_outcome`."""
    mtype = data.get("memory_type")
    importance = data.get("importance")
    return Outcome(
        action=data["action"], content=str(data["content"]), memory_id=data.get("memory_id"),
        reason=data.get("reason"), importance=None if importance is None else float(importance),
        memory_type=None if mtype is None else MemoryType.parse(mtype),
        turn_ids=tuple(data.get("turn_ids") or ()),
    )  # fmt: skip


def dump_ingest_report(report: IngestReport) -> JSON:
    """The outcome of every chunk, plus the ids stored and merged (for readers in a hurry)."""
    return {**report.to_dict(), "stored": report.stored, "merged": report.merged}


def load_ingest_report(data: Mapping[str, Any]) -> IngestReport:
    """Inverse of :func:`dump_ingest_report`."""
    return IngestReport(tuple(load_outcome(o) for o in data["outcomes"]))


# -- recall ---------------------------------------------------------------------------------


def dump_scored(item: ScoredMemory) -> JSON:
    """A memory with the score recall ranked it by."""
    return {"memory": dump_memory(item.memory), "score": item.score,
            "similarity": item.similarity, "tokens": item.tokens}  # fmt: skip


def load_scored(data: Mapping[str, Any]) -> ScoredMemory:
    """Inverse of :func:`dump_scored`."""
    return ScoredMemory(load_memory(data["memory"]), float(data["score"]),
                        float(data["similarity"]), int(data["tokens"]))  # fmt: skip


def dump_recall(result: RecallResult) -> JSON:
    """The spec's RecallResult: memories, total tokens, budget used, and the scores."""
    return {
        "memories": [dump_memory(m) for m in result.memories],
        "total_tokens": result.total_tokens,
        "budget_used": result.budget_used,
        "scored": [dump_scored(s) for s in result.scored],
    }


def load_recall(data: Mapping[str, Any]) -> RecallResult:
    """Inverse of :func:`dump_recall`."""
    return RecallResult(
        memories=[load_memory(m) for m in data["memories"]],
        total_tokens=int(data["total_tokens"]), budget_used=float(data["budget_used"]),
        scored=[load_scored(s) for s in data.get("scored") or ()],
    )  # fmt: skip


def dump_classification(c: Classification) -> JSON:
    """The classifier's verdict."""
    return {"complexity": c.complexity.value, "intent": c.intent.value,
            "domains": list(c.domains), "turn": c.turn, "has_code": c.has_code,
            "references_history": c.references_history, "signals": list(c.signals)}  # fmt: skip


def load_classification(data: Mapping[str, Any]) -> Classification:
    """Inverse of :func:`dump_classification`."""
    return Classification(
        Complexity(data["complexity"]), Intent(data["intent"]), tuple(data["domains"]),
        int(data["turn"]), bool(data["has_code"]), bool(data["references_history"]),
        tuple(data["signals"]),
    )  # fmt: skip


def dump_gated(g: Gated) -> JSON:
    """Everything the gating pipeline decided: classification, budget and its steps,
    weights, selection, every decision and score component, timings."""
    return {
        "classification": dump_classification(g.classification),
        "budget": {"tokens": g.budget.tokens, "steps": list(g.budget.steps)},
        "weights": dict(g.weights),
        "selected": [dump_scored(s) for s in g.selected],
        "tokens_used": g.tokens_used,
        "text": g.text,
        "decisions": [
            {"item": dump_scored(d.item), "selected": d.selected, "reason": d.reason}
            for d in g.decisions
        ],
        "ranked": [dump_scored(s) for s in g.ranked],
        "components": {k: dict(v) for k, v in g.components.items()},
        "timings_ms": dict(g.timings_ms),
    }


def load_gated(
    data: Mapping[str, Any],
    scored: Callable[[Mapping[str, Any]], ScoredMemory] = load_scored,
) -> Gated:
    """Inverse of :func:`dump_gated` (``scored`` reads one scored memory: a context's
    compact form names its memories by id)."""
    budget = data["budget"]
    return Gated(
        classification=load_classification(data["classification"]),
        budget=Budget(int(budget["tokens"]), tuple(budget["steps"])),
        weights={k: float(v) for k, v in data["weights"].items()},
        selected=[scored(s) for s in data["selected"]],
        tokens_used=int(data["tokens_used"]),
        text=str(data["text"]),
        decisions=[
            Decision(scored(d["item"]), bool(d["selected"]), str(d["reason"]))
            for d in data.get("decisions") or ()
        ],
        ranked=[scored(s) for s in data.get("ranked") or ()],
        components={
            k: {n: float(x) for n, x in v.items()}
            for k, v in (data.get("components") or {}).items()
        },
        timings_ms={k: float(v) for k, v in (data.get("timings_ms") or {}).items()},
    )


def context_budget(ctx: Context) -> int | None:
    """The token budget a context was assembled within: the gate's, or ``None`` when a
    compiled tier answered (its size is fixed by the tier)."""
    return ctx.gated.budget.tokens if ctx.gated is not None else None


def dump_context(ctx: Context) -> JSON:
    """A context: the block ``text`` and its ``context_id`` (for feedback), ``tokens``,
    ``budget``, ``tier``, ``fallback``, the ``memories`` it holds, the recall result and
    the gating decisions.

    Compact: every memory is written once. ``memories`` holds the injected ones (and
    ``other_memories`` any other memory the recall result or the decisions name, usually
    none); ``recall`` and ``gated`` name them by ``memory_id``, and ``gated`` leaves out
    the block text, which is ``text``. A context travels on every request of a chat, so
    the same memory written five times was most of its bytes."""
    injected = {m.id: m for m in ctx.memories}
    named = {s.memory.id: s.memory for s in _scored_items(ctx)}
    return {
        "context_id": ctx.id,
        "text": ctx.text,
        "tokens": ctx.tokens,
        "budget": context_budget(ctx),
        "tier": ctx.tier,
        "fallback": ctx.fallback,
        "elapsed_ms": ctx.elapsed_ms,
        "memories": [dump_memory(m) for m in ctx.memories],
        "other_memories": [dump_memory(m) for i, m in named.items() if i not in injected],
        "recall": {
            "memory_ids": [m.id for m in ctx.recall.memories],
            "total_tokens": ctx.recall.total_tokens,
            "budget_used": ctx.recall.budget_used,
            "scored": [_scored_ref(s) for s in ctx.recall.scored],
        },
        "gated": None if ctx.gated is None else _gated_refs(ctx.gated),
    }


def _scored_items(ctx: Context) -> list[ScoredMemory]:
    items = list(ctx.recall.scored)
    if ctx.gated is not None:
        items += [*ctx.gated.selected, *ctx.gated.ranked, *(d.item for d in ctx.gated.decisions)]
    items += [ScoredMemory(m, 0.0, 0.0, 0) for m in ctx.recall.memories]
    return items


def _scored_ref(item: ScoredMemory) -> JSON:
    return {"memory_id": item.memory.id, "score": item.score,
            "similarity": item.similarity, "tokens": item.tokens}  # fmt: skip


def _gated_refs(g: Gated) -> JSON:
    full = dump_gated(g)
    del full["text"]
    full["selected"] = [_scored_ref(s) for s in g.selected]
    full["ranked"] = [_scored_ref(s) for s in g.ranked]
    full["decisions"] = [{"item": _scored_ref(d.item), "selected": d.selected,
                          "reason": d.reason} for d in g.decisions]  # fmt: skip
    return full


def load_context(data: Mapping[str, Any]) -> Context:
    """Inverse of :func:`dump_context`."""
    memories = {
        m.id: m for m in map(load_memory, [*data["memories"], *(data.get("other_memories") or ())])
    }

    def scored(ref: Mapping[str, Any]) -> ScoredMemory:
        return ScoredMemory(memories[str(ref["memory_id"])], float(ref["score"]),
                            float(ref["similarity"]), int(ref["tokens"]))  # fmt: skip

    recall = data["recall"]
    gated = data.get("gated")
    return Context(
        id=str(data["context_id"]), text=str(data["text"]),
        recall=RecallResult(
            memories=[memories[str(i)] for i in recall["memory_ids"]],
            total_tokens=int(recall["total_tokens"]), budget_used=float(recall["budget_used"]),
            scored=[scored(s) for s in recall.get("scored") or ()],
        ),
        tokens=int(data["tokens"]), elapsed_ms=float(data["elapsed_ms"]),
        gated=None if gated is None else load_gated(
            {**gated, "text": data["text"]}, scored=scored
        ),
        tier=int(data["tier"]), fallback=bool(data["fallback"]),
    )  # fmt: skip


# -- feedback, tiers, import ---------------------------------------------------------------


def dump_feedback(result: FeedbackResult) -> JSON:
    """What one feedback changed: the target, each memory's usefulness before and after,
    the pairs learned."""
    return {
        "target": result.target,
        "usefulness": {k: {"before": b, "after": a} for k, (b, a) in result.usefulness.items()},
        "pairs_learned": result.pairs_learned,
    }


def load_feedback(data: Mapping[str, Any]) -> FeedbackResult:
    """Inverse of :func:`dump_feedback`."""
    return FeedbackResult(
        target=float(data["target"]),
        usefulness={
            k: (float(v["before"]), float(v["after"])) for k, v in data["usefulness"].items()
        },
        pairs_learned=int(data["pairs_learned"]),
    )


def dump_tiers(tiers: TierSet) -> JSON:
    """Tiers 1 and 2 of a user and project, and the memories they hold."""
    return {
        "user_id": tiers.user_id,
        "project": tiers.project,
        **tiers.to_dict(),
        "memories": [dump_memory(m) for m in tiers.memories.values()],
    }


def load_tiers(data: Mapping[str, Any]) -> TierSet:
    """Inverse of :func:`dump_tiers`."""
    memories = [load_memory(m) for m in data.get("memories") or ()]
    return TierSet(
        str(data["user_id"]), data.get("project"), int(data["revision"]),
        as_utc(datetime.fromisoformat(data["compiled_at"])),
        {Tier(int(k)): CompiledTier.from_dict(v) for k, v in data["tiers"].items()},
        {k: int(v) for k, v in (data.get("stats") or {}).items()},
        {m.id: m for m in memories},
    )  # fmt: skip


def dump_import(result: ImportResult) -> JSON:
    """What an import did."""
    return {"memories": result.memories, "stored": result.stored, "merged": result.merged,
            "discarded": result.discarded, "states": result.states}  # fmt: skip


def load_import(data: Mapping[str, Any]) -> ImportResult:
    """Inverse of :func:`dump_import`."""
    return ImportResult(int(data["memories"]), int(data["stored"]), int(data["merged"]),
                        int(data["discarded"]), int(data.get("states", 0)))  # fmt: skip


# -- the inspector's reads and curation -----------------------------------------------------


def dump_page(page: Page) -> JSON:
    """A page of :meth:`Engine.browse <engrain.engine.Engine.browse>`: its memories in
    order, how many match in all, the cursor of the next page and the order in effect."""
    return {"memories": [dump_memory(m) for m in page.memories], "total": page.total,
            "next_cursor": page.next_cursor, "sort": page.sort.value}  # fmt: skip


def load_page(data: Mapping[str, Any]) -> Page:
    """Inverse of :func:`dump_page`."""
    cursor = data.get("next_cursor")
    return Page([load_memory(m) for m in data["memories"]], int(data["total"]),
                None if cursor is None else str(cursor), Sort(data["sort"]))  # fmt: skip


def dump_relations(relations: Relations) -> JSON:
    """A memory's conflicts, the memories it corrected and the one correcting it."""
    by = relations.corrected_by
    return {"conflicts": [dump_memory(m) for m in relations.conflicts],
            "corrects": [dump_memory(m) for m in relations.corrects],
            "corrected_by": None if by is None else dump_memory(by)}  # fmt: skip


def load_relations(data: Mapping[str, Any]) -> Relations:
    """Inverse of :func:`dump_relations`."""
    by = data.get("corrected_by")
    return Relations([load_memory(m) for m in data["conflicts"]],
                     [load_memory(m) for m in data["corrects"]],
                     None if by is None else load_memory(by))  # fmt: skip


def dump_flagged_pair(pair: FlaggedPair) -> JSON:
    """One pair of the review queue (the similarity unrounded, unlike ``to_dict``)."""
    return {"first": dump_memory(pair.first), "second": dump_memory(pair.second),
            "reason": pair.reason, "detail": pair.detail,
            "similarity": pair.similarity}  # fmt: skip


def load_flagged_pair(data: Mapping[str, Any]) -> FlaggedPair:
    """Inverse of :func:`dump_flagged_pair`."""
    detail = data.get("detail")
    return FlaggedPair(load_memory(data["first"]), load_memory(data["second"]),
                       str(data["reason"]), None if detail is None else str(detail),
                       float(data["similarity"]))  # fmt: skip


def dump_resolved(result: Resolved) -> JSON:
    """What a resolution did."""
    return {"resolution": result.resolution.value, "kept": list(result.kept),
            "forgotten": list(result.forgotten),
            "superseded": list(result.superseded)}  # fmt: skip


def load_resolved(data: Mapping[str, Any]) -> Resolved:
    """Inverse of :func:`dump_resolved`."""
    return Resolved(Resolution(data["resolution"]), tuple(map(str, data["kept"])),
                    tuple(map(str, data.get("forgotten") or ())),
                    tuple(map(str, data.get("superseded") or ())))  # fmt: skip


def dump_context_record(record: ContextRecord) -> JSON:
    """One recorded context: its id, when, the ids injected, those memories still stored
    and the feedback given."""
    return record.to_dict()


def load_context_record(data: Mapping[str, Any]) -> ContextRecord:
    """Inverse of :func:`dump_context_record`."""
    return ContextRecord(
        id=str(data["context_id"]), at=as_utc(datetime.fromisoformat(data["at"])),
        memory_ids=tuple(map(str, data["memory_ids"])),
        memories=tuple(load_memory(m) for m in data.get("memories") or ()),
        feedback=tuple(float(t) for t in data.get("feedback") or ()),
    )  # fmt: skip


def dump_preview(preview: Preview) -> JSON:
    """What ``context()`` would return, with the gating pipeline's full explanation."""
    return {"tier": preview.tier, "fallback": preview.fallback, "text": preview.text,
            "tokens": preview.tokens, "budget": preview.budget,
            "memories": [dump_memory(m) for m in preview.memories],
            "gated": dump_gated(preview.gated)}  # fmt: skip


def load_preview(data: Mapping[str, Any]) -> Preview:
    """Inverse of :func:`dump_preview`."""
    return Preview(int(data["tier"]), bool(data["fallback"]), str(data["text"]),
                   int(data["tokens"]), int(data["budget"]),
                   [load_memory(m) for m in data["memories"]],
                   load_gated(data["gated"]))  # fmt: skip


# -- errors ---------------------------------------------------------------------------------


def _error_classes() -> dict[str, type[errors.EngrainError]]:
    """Each code's class: the one that names it. A subclass that only inherits a code (the
    server's 422 of an empty value is an ``EmptyInputError`` too) never stands for it."""
    found: dict[str, type[errors.EngrainError]] = {}
    stack: list[type[errors.EngrainError]] = [errors.EngrainError]
    while stack:
        cls = stack.pop()
        if "code" in vars(cls):
            found.setdefault(cls.code, cls)
        stack.extend(cls.__subclasses__())
    return found


def load_error(data: Mapping[str, Any], status: int | None = None) -> errors.EngrainError:
    """The :class:`EngrainError` a server's JSON error describes: the class whose ``code``
    it names, else the class of the HTTP status, else :class:`EngrainError`. Only classes
    of engrain's own tree are ever built (a code is looked up, never imported)."""
    message = str(data.get("message") or data.get("error") or "error")
    cls = _error_classes().get(str(data.get("error")))
    if cls is None:
        cls = _BY_STATUS.get(status or 0, errors.EngrainError)
    return cls(message)


_BY_STATUS: Mapping[int, type[errors.EngrainError]] = {
    400: errors.ValidationError,
    401: errors.AuthenticationError,
    403: errors.PermissionDeniedError,
    404: errors.NotFoundError,
    413: errors.InputTooLargeError,
    422: errors.ValidationError,
    503: errors.StoreError,
}
