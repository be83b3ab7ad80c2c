"""Use counting: every memory a context injects counts one use, and at
:data:`~engrain.tiers.PROMOTION_USES` uses it is promoted (tiers keep it whatever its age).
The context id remembers what it injected, so feedback can point at it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engrain import feedback as fb
from engrain.model import Memory
from engrain.store.base import Patch, State, Store
from engrain.tiers import PROMOTION_USES


def count(
    store: Store,
    user_id: str,
    memories: Sequence[Memory],
    when: datetime,
    *,
    reread: bool = False,
    context_id: str | None = None,
) -> tuple[list[Patch], list[State]]:
    """Count one use of each of ``memories`` (the store's atomic access counter) and return
    what to write next: the promotions of those reaching the threshold and the context
    record. ``memories`` are as the store had them just before (else ``reread`` fetches
    them after counting). A store with a ``record_uses(user_id, ids, when, state)`` method
    (SQLite) writes the record with the counts, in one transaction, and none is returned."""
    if not memories:
        return [], []
    ids = [m.id for m in memories]
    state = [] if context_id is None else [
        State(user_id, fb.CONTEXTS, context_id, fb.context_record(ids, when))
    ]  # fmt: skip
    record_uses = getattr(store, "record_uses", None)
    if callable(record_uses):  # counts and record in one transaction (SQLite)
        record_uses(user_id, ids, when, state)
        state = []
    else:
        store.record_access(user_id, ids, when)
    if reread:
        counted = [(m, m.access_count) for m in store.get(user_id, ids)]
    else:
        counted = [(m, m.access_count + 1) for m in memories]
    promoted = [
        Patch(user_id, m.id, {"promoted_at": when})
        for m, n in counted
        if m.promoted_at is None and n >= PROMOTION_USES
    ]
    return promoted, state
