"""A working set's rows as recall reads them: the fields of a memory, read from the columns
when asked, and the memory object built only for a row a call returns (issue 18).

A ``context()`` call of a user with 100,000 memories gathers ~150-400 candidates and shows
~20-90 of them. Building a :class:`~engrain.model.Memory` for each candidate cost ~6 µs a
memory (its 28 fields, five of them times) plus keeping it (``store/rows.py``); the stages
before selection read a few fields of each (kind, type, times, use count, domains, the
text of some). A :class:`Found` is such a candidate: a row of the snapshot the search read,
its fields read from the columns on first access (and kept), its vector the one the search
scored. :meth:`Found.built` builds the memory (kept like any other,
:class:`~engrain.store.rows.Decoded`), which selection asks only of what it shows.

A row whose memory is already built (kept, or an object written by this process) is that
memory: both satisfy :class:`~engrain.model.MemoryFields`, so a small user whose memories
are all kept built pays nothing more. A :class:`Found` reads a published snapshot's arrays,
which never change, and belongs to the one call that asked for it (its kept fields are
that call's); building goes through the snapshot's :class:`Decoded` and its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from engrain.model import Kind, Memory, MemoryFields, MemoryType, Provenance, Vector
from engrain.store.built import memories
from engrain.store.columns import NO_COUNT, NO_TIME, Columns, from_micros
from engrain.store.rows import Rows

__all__ = ["Found", "built_all", "found", "when_micros"]

_TYPES = tuple(MemoryType)
_KINDS = tuple(Kind)
_UNREAD: Any = object()


class Found:
    """Row ``at`` of a working set's loaded columns (``base``): a memory's fields
    (:class:`~engrain.model.MemoryFields`) read from the columns on first access, its use
    count and last use (microseconds) ``counts`` and its vector given by the search that
    found it. Kept for the next searches (:meth:`~engrain.store.rows.Decoded.keep_found`,
    dropped when its row changes or is counted), so what a thread writes into it is only
    what any thread would read (a field read, the memory built)."""

    __slots__ = (
        "__weakref__", "_at", "_base", "_content", "_created", "_domains", "_event", "_last",
        "_memory", "_provenance", "_updated", "access_count", "embedding", "id", "kind",
        "memory_type",
    )  # fmt: skip

    def __init__(
        self,
        base: Columns,
        at: int,
        memory_id: str,
        counts: tuple[int, int],
        embedding: Vector | None,
        kind: Kind,
        memory_type: MemoryType,
    ) -> None:
        self._base, self._at = base, at
        self.id = memory_id
        self.access_count, self._last = counts
        self.embedding = embedding
        self.kind, self.memory_type = kind, memory_type
        self._content: str = _UNREAD
        self._created: datetime = _UNREAD
        self._updated: datetime = _UNREAD
        self._event: datetime | None = _UNREAD
        self._domains: tuple[str, ...] | None = None
        self._provenance: Provenance | None = None
        self._memory: Memory | None = None

    def __repr__(self) -> str:
        return f"Found(id={self.id!r}, kind={self.kind.value!r})"

    @property
    def user_id(self) -> str:
        return self._base.user_id

    @property
    def content(self) -> str:
        if self._content is _UNREAD:
            self._content = self._base.content[self._at]
        return self._content

    @property
    def created_at(self) -> datetime:
        if self._created is _UNREAD:
            created = from_micros(int(self._base.created[self._at]))
            assert created is not None
            self._created = created
        return self._created

    @property
    def updated_at(self) -> datetime:
        if self._updated is _UNREAD:
            updated = from_micros(int(self._base.updated[self._at]))
            assert updated is not None
            self._updated = updated
        return self._updated

    @property
    def event_at(self) -> datetime | None:
        if self._event is _UNREAD:
            self._event = from_micros(int(self._base.event[self._at]))
        return self._event

    @property
    def when(self) -> datetime:
        """The time the memory is about (:attr:`Memory.when <engrain.model.Memory.when>`)."""
        return self.event_at or self.updated_at

    @property
    def project(self) -> str | None:
        return self._base.project[self._at]

    @property
    def domains(self) -> tuple[str, ...]:
        if self._domains is None:
            self._domains = self._base._domain(self._at)
        return self._domains

    @property
    def session_id(self) -> str | None:
        return self._base.session_id[self._at]

    @property
    def key(self) -> str | None:
        return self._base.key[self._at]

    @property
    def importance(self) -> float:
        return float(self._base.importance[self._at])

    @property
    def confidence(self) -> float:
        return float(self._base.confidence[self._at])

    @property
    def usefulness(self) -> float:
        return float(self._base.usefulness[self._at])

    @property
    def last_accessed_at(self) -> datetime | None:
        return from_micros(self._last)

    @property
    def pinned(self) -> bool:
        return bool(self._base.pinned[self._at])

    @property
    def muted(self) -> bool:
        return bool(self._base.muted[self._at])

    @property
    def promoted_at(self) -> datetime | None:
        return from_micros(int(self._base.promoted[self._at]))

    @property
    def compressed(self) -> bool:
        return bool(self._base.compressed[self._at])

    @property
    def compression_source(self) -> bool:
        return bool(self._base.compression_source[self._at])

    @property
    def source_session_id(self) -> str | None:
        return self._base.source_session_id[self._at]

    @property
    def superseded_by(self) -> str | None:
        return self._base.superseded_by[self._at]

    @property
    def provenance(self) -> Provenance:
        if self._provenance is None:
            self._provenance = self._base._provenance_of(self._at)
        return self._provenance

    @property
    def content_hash(self) -> str:
        return self._base.content_hash[self._at]

    @property
    def content_tokens(self) -> int | None:
        count = int(self._base.content_tokens[self._at])
        return None if count == NO_COUNT else count

    def built(self) -> Memory:
        """The memory of this row (built once)."""
        memory = self._memory
        if memory is None:
            memory = self._base.memory(self._at, self.embedding, self.access_count, self._last)
            self._memory = memory
        return memory


def found(
    rows: Rows,
    positions: Sequence[int],
    ids: Sequence[str],
    embedding: Callable[[int], Vector | None],
    *,
    defer_texts: bool = False,
) -> list[MemoryFields]:
    """The fields of each of ``positions`` (whose ids are ``ids``; ``embedding(position)``
    gives a loaded row's vector): the memory itself where it is built already (kept, or an
    object of ``rows``), the row as found by an earlier search if kept, else a new
    :class:`Found`, kept. Texts kept in the store are read for all of them at once, now, or
    with ``defer_texts`` when the first of them is asked for (``RowTexts.defer``: a
    search on the calling thread, whose candidates' texts are rarely asked for; building
    reads those of the memories built)."""
    decoded = rows.decoded
    out: list[MemoryFields | None] = decoded.fields_many(ids)
    todo = [i for i, kept in enumerate(out) if kept is None]
    if not todo:
        return [_memory_of(m) for m in out if m is not None]
    sources = rows.source[[positions[i] for i in todo]].tolist()
    from_base = [(i, at) for i, at in zip(todo, sources, strict=True) if at >= 0]
    for i, at in zip(todo, sources, strict=True):
        if at < 0:
            out[i] = rows.memory(positions[i], ids[i], lambda: None)
    if from_base:
        base = rows.base
        assert base is not None
        source = [at for _, at in from_base]
        read = getattr(base.content, "defer" if defer_texts else "prefetch", None)
        if read is not None:  # texts kept in the store: one read for all of them
            read(source)
        access, last = rows.counts.many([positions[i] for i, _ in from_base])
        kinds, types = _codes(base, source)
        new = [Found(base, at, ids[i], (access[n], last[n]), embedding(positions[i]), kinds[n],
                     types[n]) for n, (i, at) in enumerate(from_base)]  # fmt: skip
        decoded.keep_found(new)
        for (i, _), fields in zip(from_base, new, strict=True):
            out[i] = fields
    return [_memory_of(m) for m in out if m is not None]


def _memory_of(fields: MemoryFields) -> MemoryFields:
    """A row found whose memory was built since: that memory (its fields read directly)."""
    if type(fields) is Found and fields._memory is not None:
        return fields._memory
    return fields


def _codes(base: Columns, source: list[int]) -> tuple[list[Kind], list[MemoryType]]:
    """The kinds and memory types of ``base``'s rows ``source``, each column read once."""
    kinds = [_KINDS[k] for k in base.kind[source].tolist()]
    types = [_TYPES[t] for t in base.memory_type[source].tolist()]
    return kinds, types


def when_micros(items: Sequence[object]) -> list[int | None]:
    """For each of ``items``: if it is a row found (:class:`Found`), the time its memory is
    about (:attr:`Found.when`) in microseconds since the epoch, read from its columns (the
    rows of one working set's columns all at once: no ``datetime`` is made); else ``None``
    (a memory, whose ``when`` is its own field). A scorer of a big pool reads the ages of
    its candidates this way (``recall/score_batch.py``); the snapshot's columns are never
    written, so any thread reads them without a lock."""
    out: list[int | None] = [None] * len(items)
    groups: dict[int, tuple[Columns, list[int], list[int]]] = {}
    for i, item in enumerate(items):
        if type(item) is Found:
            group = groups.get(id(item._base))
            if group is None:
                group = groups[id(item._base)] = (item._base, [], [])
            group[1].append(i)
            group[2].append(item._at)
    for base, where, at in groups.values():
        event, updated = base.event[at], base.updated[at]
        # Memory.when: the event's time, else the last update's
        for i, when in zip(where, np.where(event != NO_TIME, event, updated).tolist(), strict=True):
            out[i] = when
    return out


def built_all(items: Sequence[MemoryFields]) -> list[Memory]:
    """The memory of each of ``items``: rows found in the same columns are built together
    (:func:`~engrain.store.built.memories`, each column read once)."""
    todo = [f for f in items if type(f) is Found and f._memory is None]
    by_base: dict[int, list[Found]] = {}
    for f in todo:
        by_base.setdefault(id(f._base), []).append(f)
    for group in by_base.values():
        prefetch = getattr(group[0]._base.content, "prefetch", None)
        if prefetch is not None:  # texts kept in the store: these rows' in one read
            prefetch([f._at for f in group])
        built = memories(
            group[0]._base, [f._at for f in group], [f.embedding for f in group],
            [f.access_count for f in group], [f._last for f in group], [f.id for f in group],
        )  # fmt: skip
        for f, memory in zip(group, built, strict=True):
            if f._memory is None:  # another thread may have been first: one object
                f._memory = memory
    return [item.built() for item in items]
