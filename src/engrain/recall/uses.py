"""Use counting: every memory a context injects counts one use, and at
:data:`~engrain.tiers.PROMOTION_USES` uses it is promoted (tiers keep it whatever its age).
The context id remembers what it injected, so feedback can point at it: the record is
written with the counts, in one transaction of the store (:meth:`Store.record_uses`).

A store opened read-only (a true ``read_only`` attribute: SQLite on a read-only mount,
``store/sqlite_open.py``) counts nothing and keeps no record: the context is still
answered, as a replica serves reads, and the store said so once when it opened."""

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
) -> list[Patch]:
    """Count one use of each of ``memories`` and write the context record
    (``context_id``) with the counts, in one transaction (:meth:`Store.record_uses`), and
    return the promotions of those reaching the threshold, to write next. ``memories`` are
    as the store had them just before (else ``reread`` fetches them after counting)."""
    if not memories or read_only(store):
        return []
    ids = [m.id for m in memories]
    state = [] if context_id is None else [
        State(user_id, fb.CONTEXTS, context_id, fb.context_record(ids, when))
    ]  # fmt: skip
    store.record_uses(user_id, ids, when, state)
    if reread:
        counted = [(m, m.access_count) for m in store.get(user_id, ids)]
    else:
        counted = [(m, m.access_count + 1) for m in memories]
    return [
        Patch(user_id, m.id, {"promoted_at": when})
        for m, n in counted
        if m.promoted_at is None and n >= PROMOTION_USES
    ]


def read_only(store: object) -> bool:
    """Whether ``store`` was opened read-only, so that nothing can be written to it."""
    return bool(getattr(store, "read_only", False))
