"""What a forget removes beyond the memories named: what was made from them.

Two things hold a memory's words outside its own row. A session's summary (``compress.py``)
is written from the session's episodic memories, which are then kept but compressed; a
compiled tier set (``tiers/cache.py``) holds the text of the memories it injects. A memory
forgotten must be gone from both, not only from its row (``docs/decisions.md``, "Forgotten
means gone"):

- with ``Settings.forget_summaries`` (off by default: a summary is a memory of its own,
  and the shared reliability scripts hold that a forget removes only what it names), a
  summary made from a forgotten memory is forgotten with it, and the session's other
  memories are no longer compressed: they are recalled on their own again, and the next
  compression summarises the session anew, without the forgotten one;
- a stored tier set naming a forgotten memory is deleted (it was already stale: the
  forget moved the user's revision), so neither the inspector nor a copy of the store
  shows it; the next ``context()`` for a small model compiles it again.

A forget plans this from what it reads and writes it in its own transaction. A summary or
a tier set another thread or process commits between that read and the write was made
before the forget and names the memory, so each side checks after its own commit: the
forget looks again (:func:`made_from`), a compression looks at its sources
(:func:`orphaned`), a tier compile at its memories (``TierCache.compile``). Whichever of the
two commits second sees the other's commit and removes what is left.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engrain.model import Kind, Memory, MemoryType
from engrain.store.base import MemoryFilter, Patch, State, Store
from engrain.tiers.cache import NAMESPACE as TIERS

#: The metadata key of a summary listing the memories it was written from.
SOURCES = "compressed_from"

_SUMMARIES = MemoryFilter(kinds=(Kind.SUMMARY,))


@dataclass(frozen=True)
class Derived:
    """What to write with a forget: the summaries to delete, the patches that stop their
    other sources being compressed, and the tier sets to drop."""

    deletes: list[Memory] = field(default_factory=list)
    patches: list[Patch] = field(default_factory=list)
    state: list[State] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.deletes or self.patches or self.state)


def sources(summary: Memory) -> tuple[str, ...]:
    """The ids of the memories ``summary`` was written from (none for other memories)."""
    if not summary.compression_source:
        return ()
    found = summary.provenance.metadata.get(SOURCES)
    return tuple(i for i in found if isinstance(i, str)) if isinstance(found, list) else ()


def made_from(
    store: Store, user_id: str, gone: Sequence[Memory], *, summaries_too: bool = True
) -> Derived:
    """The summaries and tier sets of ``user_id`` made from any of ``gone`` (memories being
    forgotten), and what un-compresses the summaries' other sources; with
    ``summaries_too=False`` (``Settings.forget_summaries`` off) the tier sets only. Only an
    episodic memory of a session is ever summarised, so a forget of none reads no summary."""
    ids = {m.id for m in gone}
    summaries: list[Memory] = []
    if summaries_too and any(m.memory_type is MemoryType.EPISODIC and m.session_id
                             for m in gone):  # fmt: skip
        summaries = [s for s in store.query(user_id, _SUMMARIES)
                     if s.id not in ids and ids.intersection(sources(s))]  # fmt: skip
    return _removal(store, user_id, summaries, ids)


def orphaned(store: Store, user_id: str, summaries: Sequence[Memory]) -> Derived:
    """For summaries just written: those whose sources are not all stored any more (a
    forget committed while they were written), with what un-compresses the rest."""
    wanted = {i for s in summaries for i in sources(s)}
    stored = {m.id for m in store.get(user_id, sorted(wanted))} if wanted else set()
    lost = [s for s in summaries if not stored.issuperset(sources(s))]
    return _removal(store, user_id, lost, wanted - stored) if lost else Derived()


def _removal(
    store: Store, user_id: str, summaries: Sequence[Memory], gone: Collection[str]
) -> Derived:
    """``summaries`` deleted, their sources other than ``gone`` un-compressed, and the
    tier sets naming any of ``gone`` or of ``summaries`` dropped."""
    dropped = {*gone, *(s.id for s in summaries)}
    keep = sorted({i for s in summaries for i in sources(s)} - dropped)
    patches = [Patch(user_id, i, {"compressed": False}) for i in keep]
    return Derived(list(summaries), patches, tier_sets(store, user_id, dropped))


def tier_sets(store: Store, user_id: str, ids: Collection[str]) -> list[State]:
    """A deletion of each stored tier set of ``user_id`` naming any of ``ids``, decided
    against the set the write's transaction finds (a set compiled again meanwhile without
    them is kept)."""
    found = [s.key for s in store.states(user_id, TIERS) if names(s.value, ids)]
    return [State(user_id, TIERS, key, None, change=_unless_free_of(frozenset(ids)))
            for key in found]  # fmt: skip


def names(document: Mapping[str, Any] | None, ids: Collection[str]) -> bool:
    """Whether a stored tier set holds any of ``ids``."""
    if not document:
        return False
    tiers = document.get("tiers")
    parts: Iterable[Any] = tiers.values() if isinstance(tiers, Mapping) else ()
    return any(i in ids for part in parts if isinstance(part, Mapping)
               for i in part.get("memory_ids") or ())  # fmt: skip


def _unless_free_of(ids: frozenset[str]) -> Any:
    def change(current: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return None if names(current, ids) else current

    return change
