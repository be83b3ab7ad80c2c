"""Relevance gating, end to end: classify → budget → candidates → score → select → assemble.

:func:`gate` is a straight pipeline, one call per stage; it reads the store only before
selection and returns everything it decided (:class:`~engrain.recall.results.Gated`), so
``Engine.context`` has the block and ``Engine.explain`` shows why each candidate was or
was not injected. Each stage is a module of its own, taking the call
(:class:`~engrain.recall.stages.Call`) and what the stage before handed on
(:mod:`~engrain.recall.stages`):

* :mod:`~engrain.recall.understand` — classify → budget, and the turn before;
* :mod:`~engrain.recall.pool` — the candidates of each kind, through
  :mod:`~engrain.recall.pool_reads` (the reads begun beside the query's embedding, the
  nearest searches) and :mod:`~engrain.recall.pool_rules` (the pool's rules, in order);
* :mod:`~engrain.recall.rank` — every candidate scored once by the profile's scorer;
* :mod:`~engrain.recall.selection` — the greedy fill within the budget;
* :mod:`~engrain.recall.block` — the block fitted to its budget and the record returned.

The per-call options are :class:`~engrain.recall.options.GateOptions` (re-exported here, as
are :data:`LEARNING_KINDS` and :data:`LEARNINGS_MAX`, for the callers that import them from
here). A call holds all its state in the values it makes and drops; no stage keeps any
between calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from engrain.feedback import Pairs
from engrain.model import MemoryType, Vector
from engrain.recall import candidates as cand
from engrain.recall.block import assemble
from engrain.recall.classify import Complexity
from engrain.recall.options import GateOptions
from engrain.recall.pool import LEARNING_KINDS, LEARNINGS_MAX, pool_of
from engrain.recall.rank import rank
from engrain.recall.results import Gated
from engrain.recall.selection import select
from engrain.recall.stages import Call, Clock
from engrain.recall.understand import follow_up, understand
from engrain.store.base import Store
from engrain.store.reads import Reads

__all__ = ["LEARNINGS_MAX", "LEARNING_KINDS", "GateOptions", "Gated", "gate"]


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
    top_k: int | None = None,
    explain: bool = True,
    previous: str | None = None,
    reads: Reads | None = None,
) -> Gated:
    """Run the gating pipeline for ``message``: classify → budget → candidates → score →
    select → assemble, one call each. ``token_budget`` overrides the automatic budget and
    ``max_budget`` caps it (a small model's tier budget); a trivial message gets nothing
    either way, without touching the store. ``top_k`` caps the number of memories. Without
    ``explain`` the per-candidate decisions are not recorded and selection stops once the
    budget is full (what ``context()`` needs; ``explain()`` records them all). ``previous``,
    the conversation's turn before ``message``, lends it its subject where it has none of
    its own (``recall.previous``): the message is classified as a turn after the first, and
    the pool of one that leans on the turn before is searched with both turns. ``reads``:
    how the reads that need no query vector run (:class:`~engrain.store.reads.Reads`;
    default: the store's way)."""
    call = Call(
        store, embed_query, message, user_id, options, now,
        cand.recall_filter(min_importance=options.min_importance, memory_types=memory_types,
                           project=project, include_compressed=include_compressed),
        Reads(store) if reads is None else reads, token_budget, max_budget, top_k, explain,
        previous, cooccurrence, Clock(),
    )  # fmt: skip
    # there was a turn before: a follow-up can be read as one
    understood = understand(call, turn if previous is None else max(turn, 1))
    if understood.budget.tokens == 0 or understood.classification.complexity is Complexity.TRIVIAL:
        return Gated(understood.classification, understood.budget, understood.weights, [], 0, "",
                     timings_ms=call.clock.laps)  # fmt: skip
    pool = pool_of(call, follow_up(call, understood))
    return assemble(call, select(call, rank(call, pool)))
