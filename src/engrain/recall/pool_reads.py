"""The pool's reads: those begun beside the query's embedding, and the nearest searches.

:func:`start_reads` takes the call, the text searched and the budget and gives the reads
that need no query vector, begun (:class:`~engrain.recall.stages.Started`: the lexical
matches and the pinned memories, run as the call's :class:`~engrain.store.reads.Reads`
runs them, overlapping the embedding where the store allows); :func:`nearest` takes a
query vector and the searches and gives their matches, in one product where the store can.
No state beyond the reads a call begins, which only that call waits for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engrain.model import MemoryFields, Vector
from engrain.recall.budget import Budget
from engrain.recall.options import GateOptions
from engrain.recall.score import Profile
from engrain.recall.stages import Call, Started
from engrain.store.base import FoundSearch, MemoryFilter, Store
from engrain.store.reads import Begin, Reads


def pool_size(options: GateOptions, budget: Budget) -> int:
    """How many nearest and lexical matches the pool takes: deep enough to fill the budget
    with chunk-sized memories (~40 tokens each)."""
    return max(options.pool, budget.tokens // 40)


def start_reads(
    call: Call,
    text: str,
    budget: Budget,
    *,
    pinned: bool = True,
    size: int | None = None,
    reads: Reads | None = None,
) -> Started:
    """Begin the pool's lexical matches of ``text`` (``size`` deep, default the budget's
    pool size) and (``pinned``) its pinned memories, as ``reads`` (default the call's) runs
    them (:class:`Reads`: at once on a store that serves reads from several threads or with
    ``overlap``, else when first asked for)."""
    store, user_id, flt, options = call.store, call.user_id, call.flt, call.options
    reads = call.reads if reads is None else reads
    size = pool_size(options, budget) if size is None else size
    search = _lexical(store)
    lexical = (
        reads.start(lambda: search(user_id, text, size, flt))
        if options.hybrid and options.profile is not Profile.STATIC
        else None
    )
    pins = reads.start(lambda: store.query(user_id, flt.update(pinned=True))) if pinned else list
    return Started(size, lexical, pins)


def _lexical(
    store: Store,
) -> Callable[[str, str, int, MemoryFilter], Sequence[tuple[MemoryFields, float]]]:
    """The store's lexical search, its matches as their fields where it can
    (:class:`~engrain.store.base.FoundSearch`: built only if shown)."""
    return store.lexical_found if isinstance(store, FoundSearch) else store.lexical_search


def nearest(
    store: Store,
    user_id: str,
    vector: Vector,
    searches: Sequence[tuple[int, MemoryFilter]],
    begin: Begin | None = None,
) -> list[list[tuple[MemoryFields, float]]]:
    """``store.search(user_id, vector, k, flt)`` for each ``(k, flt)``: the pool's nearest
    and the learnings' nearest. A store with a ``search_many(user_id, vector, searches)``
    method answers all of them from one product of the query with its matrix (the second
    product is what scoring every learning costs: 2-4 ms at 10,000 memories on a busy
    2-core machine); any other store searches once per filter. The matches are their
    fields where the store can give them (:class:`~engrain.store.base.FoundSearch`), whose
    search may begin its second index's walk with ``begin`` (:meth:`Reads.beside`)."""
    if isinstance(store, FoundSearch):
        return store.search_found(user_id, vector, list(searches), begin)
    many = getattr(store, "search_many", None)
    searched: list[list[tuple[MemoryFields, float]]]
    if callable(many):
        searched = [list(found) for found in many(user_id, vector, list(searches))]
    else:
        searched = [list(store.search(user_id, vector, k, flt)) for k, flt in searches]
    return searched
