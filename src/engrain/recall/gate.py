"""Relevance gating, end to end: classify → budget → candidates → score → select → assemble.

:func:`gate` returns everything it decided, so ``Engine.context`` renders the block and
``Engine.explain`` shows why each candidate was or was not injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engrain.corrections import conflicts_of
from engrain.feedback import ANCHORS, Pairs, cooccurrence_bonus
from engrain.model import Memory, MemoryType, ScoredMemory, Vector
from engrain.recall import candidates as cand
from engrain.recall.assemble import Format, item_line, render
from engrain.recall.budget import DEPTH_EFFECT, Budget, Depth, assign_budget
from engrain.recall.classify import Classification, Complexity, classify
from engrain.recall.relevance import LEXICAL_WEIGHT, Candidate, gather
from engrain.recall.score import (
    STATIC_TOP,
    Profile,
    Scored,
    gated_weights,
    score_composite,
    score_gated,
    score_static,
)
from engrain.recall.select import Decision, select_gated
from engrain.store.base import Store
from engrain.store.reads import Reads
from engrain.tokens import count_tokens

if TYPE_CHECKING:  # config.py takes its recall defaults from GateOptions: no runtime import
    from engrain.config import Settings


@dataclass(frozen=True)
class GateOptions:
    """Per-call options of the gating pipeline; :meth:`update` gives a changed copy."""

    profile: Profile = Profile.GATED
    format: Format = Format.TAGGED
    depth: Depth = Depth.NORMAL
    prioritize_speed: bool = False
    focus_areas: tuple[str, ...] = ()
    hybrid: bool = True
    lexical_weight: float = LEXICAL_WEIGHT
    pool: int = 50
    min_importance: float = 0.2
    thresholds: str = "auto"
    fusion: str = "blend"

    def update(self, **changes: Any) -> GateOptions:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    @classmethod
    def from_settings(cls, settings: Settings) -> GateOptions:
        """The options ``settings`` configure: what ``context()`` uses unless a call passes
        its own. ``thresholds`` and ``fusion`` are per-call only and keep their defaults."""
        return cls(
            profile=settings.profile, format=settings.prompt_format, depth=settings.depth,
            prioritize_speed=settings.prioritize_speed, focus_areas=settings.focus_areas,
            hybrid=settings.hybrid, lexical_weight=settings.lexical_weight,
            pool=settings.candidate_pool, min_importance=settings.recall_min_importance,
        )  # fmt: skip


@dataclass(frozen=True)
class Gated:
    """What the pipeline decided for one message."""

    classification: Classification
    budget: Budget
    weights: Mapping[str, float]
    selected: list[ScoredMemory]
    tokens_used: int
    text: str
    decisions: list[Decision] = field(default_factory=list)
    ranked: list[ScoredMemory] = field(default_factory=list)
    components: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    timings_ms: Mapping[str, float] = field(default_factory=dict)

    @property
    def memories(self) -> list[Memory]:
        """The injected memories, in rendering order."""
        return [s.memory for s in self.selected]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready explanation: classification, budget derivation, weights, and every
        candidate's score components with its verdict."""
        c = self.classification
        return {
            "classification": {
                "complexity": c.complexity.value, "intent": c.intent.value,
                "domains": list(c.domains), "turn": c.turn, "has_code": c.has_code,
                "references_history": c.references_history, "signals": list(c.signals),
            },
            "budget": {"tokens": self.budget.tokens, "steps": list(self.budget.steps)},
            "weights": dict(self.weights),
            "tokens_used": self.tokens_used,
            "candidates": [
                {
                    "id": d.item.memory.id, "content": d.item.memory.content,
                    "kind": d.item.memory.kind.value, "score": round(d.item.score, 6),
                    "similarity": round(d.item.similarity, 6), "tokens": d.item.tokens,
                    "components": {k: round(v, 6) for k, v in
                                   self.components.get(d.item.memory.id, {}).items()},
                    "selected": d.selected, "reason": d.reason,
                }
                for d in self.decisions
            ],
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
        }  # fmt: skip


def gate(
    store: Store,
    embed_query: Callable[[str], Vector],
    message: str,
    user_id: str,
    *,
    options: GateOptions,
    now: datetime,
    turn: int = 0,
    token_budget: int | None = None,
    memory_types: Sequence[MemoryType] | None = None,
    project: str | None = None,
    include_compressed: bool = False,
    cooccurrence: Pairs | None = None,
    max_budget: int | None = None,
    explain: bool = True,
) -> Gated:
    """Run the gating pipeline for ``message``. ``token_budget`` overrides the automatic
    budget; without it, trivial messages skip the pipeline and inject nothing, and
    ``max_budget`` caps the automatic budget (a small model's tier budget). Without
    ``explain`` the per-candidate decisions are not recorded and selection stops once the
    budget is full (what ``context()`` needs; ``explain()`` records them all)."""
    clock = _Clock()
    classification = classify(message, turn=turn)
    clock.lap("classify")
    if token_budget is not None:
        budget = Budget(token_budget, (f"explicit: {token_budget}",))
    else:
        budget = assign_budget(
            classification, depth=options.depth, prioritize_speed=options.prioritize_speed
        )
        if max_budget is not None and budget.tokens > max_budget:
            budget = Budget(max_budget, (*budget.steps, f"capped at {max_budget} (tier)"))
    weights = gated_weights(classification)
    clock.lap("budget")
    if budget.tokens == 0 and classification.complexity is Complexity.TRIVIAL:
        return Gated(classification, budget, weights, [], 0, "", timings_ms=clock.laps)

    flt = cand.recall_filter(
        min_importance=options.min_importance,
        memory_types=memory_types,
        project=project,
        include_compressed=include_compressed,
    )
    # a pool deep enough to fill the budget with chunk-sized memories (~40 tokens each)
    size = max(options.pool, budget.tokens // 40)
    static = options.profile is Profile.STATIC
    # the reads that do not need the query vector overlap its computation where they can
    reads = Reads(store)
    lexical = (
        reads.start(lambda: store.lexical_search(user_id, message, size, flt))
        if options.hybrid and not static
        else None
    )
    pinned = reads.start(lambda: store.query(user_id, flt.update(pinned=True)))
    procedurals = reads.start(
        lambda: cand.procedural(store, user_id, project=project, memory_types=memory_types)
    )
    vector = embed_query(message)
    clock.lap("embed")
    if static:
        pool = [Candidate(m, 0.0, 0.0, 0.0) for m in store.query(user_id, flt)]
    else:
        pool = gather(
            store, user_id, message, vector, flt, pool=size, hybrid=options.hybrid,
            lexical_weight=options.lexical_weight, fusion=options.fusion,
            lexical=lexical() if lexical else None,
        )  # fmt: skip
    pool = _with_pinned(pinned(), pool, vector)
    clock.lap("candidates")

    scored: list[tuple[Candidate, Scored]] = []
    for c in pool:
        if options.profile is Profile.GATED:
            s = score_gated(
                c.memory, c.relevance, classification, weights, now,
                focus_areas=options.focus_areas,
            )  # fmt: skip
        elif options.profile is Profile.COMPOSITE:
            s = score_composite(c.memory, c.relevance, now)
        else:
            s = score_static(c.memory, now)
        scored.append((c, s))
    scored.sort(key=lambda pair: pair[1].total, reverse=True)
    if cooccurrence and options.profile is Profile.GATED:
        # the learned bonus: co-occurring with the best-scoring candidates (feedback.py)
        anchors = [c.id for c, _ in scored[:ANCHORS]]
        rescored = []
        for c, s in scored:
            bonus = cooccurrence_bonus(cooccurrence, c.id, anchors)
            if bonus:
                s = score_gated(
                    c.memory, c.relevance, classification, weights, now,
                    cooccurrence=bonus, focus_areas=options.focus_areas,
                )  # fmt: skip
            rescored.append((c, s))
        scored = sorted(rescored, key=lambda pair: pair[1].total, reverse=True)
    if options.profile is Profile.STATIC:
        scored = scored[:STATIC_TOP]
    ranked = [_item(c, s.total, options.format) for c, s in scored]
    components = {c.id: dict(s.components) for c, s in scored}
    clock.lap("score")

    procedural = (
        _item(Candidate(m, 0.0, 0.0, 0.0), 1.0, options.format)
        for m in procedurals()
        if m.importance >= options.min_importance
    )
    shift = DEPTH_EFFECT[options.depth][1]
    selected, used, decisions = select_gated(
        procedural, ranked, token_budget=budget.tokens, intent=classification.intent,
        threshold_shift=shift, apply_threshold=_thresholds_apply(options, token_budget),
        explain=explain,
    )  # fmt: skip
    selected, used = _with_conflicting(store, user_id, selected, used, budget.tokens, options)
    clock.lap("select")
    text = render([s.memory for s in selected], options.format)
    clock.lap("assemble")
    return Gated(classification, budget, weights, selected, used, text, decisions, ranked,
                 components, clock.laps)  # fmt: skip


def _with_conflicting(
    store: Store,
    user_id: str,
    selected: list[ScoredMemory],
    used: int,
    budget: int,
    options: GateOptions,
) -> tuple[list[ScoredMemory], int]:
    """Memories flagged as contradicting a selected one are injected beside it (budget
    permitting), so the model sees both versions with their dates (``corrections.py``)."""
    have = {s.memory.id for s in selected}
    wanted = [i for s in selected for i in conflicts_of(s.memory) if i not in have]
    if not wanted:
        return selected, used
    out = list(selected)
    for memory in store.get(user_id, list(dict.fromkeys(wanted))):
        if memory.muted or memory.superseded_by is not None or memory.id in have:
            continue
        item = _item(Candidate(memory, 0.0, 0.0, 0.0), 0.0, options.format)
        if used + item.tokens <= budget:
            out.append(item)
            have.add(memory.id)
            used += item.tokens
    return out, used


def _thresholds_apply(options: GateOptions, explicit_budget: int | None) -> bool:
    """Intent thresholds gate the gated profile's automatic selection. An explicit budget
    is the caller deciding how much memory to inject (the spec's recall): it is filled in
    score order unless ``thresholds="always"``."""
    if options.profile is not Profile.GATED or options.thresholds == "never":
        return False
    return options.thresholds == "always" or explicit_budget is None


def _item(candidate: Candidate, score: float, fmt: Format) -> ScoredMemory:
    memory = candidate.memory
    return ScoredMemory(memory, score, candidate.similarity, line_tokens(memory, fmt))


#: Token cost of each memory object's line, per format. Memories are immutable and the
#: stores hand out the same object until it changes, so a cost is computed once per version
#: (10,000 memories with 337 procedural ones: 5 ms less per call). Holding the object keeps
#: its ``id()`` from being reused while the entry lives.
_LINE_TOKENS: dict[tuple[int, Format], tuple[Memory, int]] = {}
_LINE_TOKENS_MAX = 200_000


def line_tokens(memory: Memory, fmt: Format) -> int:
    """``count_tokens(item_line(memory, fmt))``, remembered per memory object."""
    key = (id(memory), fmt)
    hit = _LINE_TOKENS.get(key)
    if hit is not None and hit[0] is memory:
        return hit[1]
    tokens = count_tokens(item_line(memory, fmt))
    if len(_LINE_TOKENS) >= _LINE_TOKENS_MAX:
        _LINE_TOKENS.clear()
    _LINE_TOKENS[key] = (memory, tokens)
    return tokens


def _with_pinned(
    pinned: Sequence[Memory], pool: list[Candidate], vector: Vector
) -> list[Candidate]:
    """Pinned memories join the pool whatever their relevance: they bypass the threshold."""
    have = {c.id for c in pool}
    extra = [
        Candidate(m, sim, 0.0, max(0.0, sim))
        for m in pinned
        if m.id not in have
        for sim in [float(m.embedding @ vector) if m.embedding is not None else 0.0]
    ]
    return pool + extra


class _Clock:
    """Per-stage wall-clock laps in milliseconds."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = (now - self._last) * 1000.0
        self._last = now
