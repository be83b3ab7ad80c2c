"""The memories of a working set's rows, built only when a call asks for one (issue 18).

A working set (``store/cache.py``) keeps its filters, order and vectors as arrays; the
memories themselves are a :class:`Rows`: per row either a row of a :class:`~engrain.store.
columns.Columns` table (what the store loaded: decoded on demand) or a ``Memory`` object
(what this process wrote since, or every row of a store that holds objects anyway). Access
counts are :class:`Counts`: two arrays for every row and the rows counted since they were
copied, so counting a use copies neither a mapping of every memory nor (below
:data:`COUNTED_MAX` rows counted) the arrays. Built memories are kept (:class:`Decoded`,
at most :data:`DECODED_MAX`, the older half dropped when full), so a memory asked for twice
is one object until its row changes or it is dropped.

Like the rest of a snapshot, a :class:`Rows` is never changed once published: the methods
that change something return a new one. The :class:`Decoded` cache is the one part shared
by readers and filled while reading; it has its own lock, and a row's entry is dropped or
replaced in the copy a change makes, never in the one readers hold.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from engrain.model import Memory, MemoryFields, Vector
from engrain.store.columns import Columns, from_micros, micros

if TYPE_CHECKING:
    from collections.abc import Callable

Int64Array = npt.NDArray[np.int64]
_V = TypeVar("_V")

#: Built memories and rows found kept per working set (~2.3 KB each, most of it the
#: vector); when full the older half (by when each was kept) is dropped, so what the last
#: calls found stays. 6,000 (session 17, issue 18; docs/scale.md): 10,000 started over when
#: full held ~6,500 at 100,000 memories after bench/latency.py's calls (14.7 MB), and the
#: process 306 MB; 6,000 halved holds 3,000-6,000: 294 MB, the calling thread's CPU a call
#: not changed (p50 / p95 -0.5 / -2.8 ms, the load's), at 10,000 memories +0.21 / +0.28 ms.
#: 4,000: 288 MB but +0.6 ms p50 at 10,000. Starting over at 2,000 made context() at 10,000
#: memories 1.2x slower (p95 16.6 -> 21.0 ms: ~250 rows a call built again each restart).
DECODED_MAX = 6_000

#: Rows counted since a working set's access arrays were last copied, above which the next
#: count copies them with every count applied. Copying the two arrays on every ``context()``
#: cost 0.47 ms of CPU at 100,000 memories and 3.7 ms at 1,000,000 (16 MB written and
#: freed a call); a mapping of a few thousand rows costs ~0.02 ms to copy, and the arrays are
#: then copied once every ~40 calls of ~100 memories.
COUNTED_MAX = 4_096


@dataclass(frozen=True, eq=False)
class Counts:
    """Access counts and last accesses (microseconds) of a working set's rows: row ``i``'s
    are ``counted[i]`` if it was counted since ``access`` and ``last`` were copied, else
    ``access[i]`` and ``last[i]``. Never changed once built (the arrays are shared by the
    snapshots that follow, and never written); :meth:`added` returns a new one."""

    access: Int64Array
    last: Int64Array
    counted: Mapping[int, tuple[int, int]]

    @classmethod
    def of(cls, access: Int64Array, last: Int64Array) -> Counts:
        """These counts and last accesses, nothing counted since."""
        return cls(access, last, {})

    def __len__(self) -> int:
        return len(self.access)

    def one(self, row: int) -> tuple[int, int]:
        """Row ``row``'s access count and last access."""
        found = self.counted.get(row)
        return found if found is not None else (int(self.access[row]), int(self.last[row]))

    def many(self, rows: Sequence[int]) -> tuple[list[int], list[int]]:
        """The access counts and last accesses of ``rows``, as lists."""
        at = np.asarray(rows, dtype=np.intp)
        access, last = self.access[at].tolist(), self.last[at].tolist()
        counted = self.counted
        if counted:
            for i, row in enumerate(at.tolist()):
                found = counted.get(row)
                if found is not None:
                    access[i], last[i] = found
        return access, last

    def arrays(self) -> tuple[Int64Array, Int64Array]:
        """Every row's access count and last access as new arrays (the caller's to change)."""
        access, last = self.access.copy(), self.last.copy()
        if self.counted:
            rows = np.fromiter(self.counted, np.intp, len(self.counted))
            values = np.array(list(self.counted.values()), dtype=np.int64).reshape(-1, 2)
            access[rows], last[rows] = values[:, 0], values[:, 1]
        return access, last

    def added(self, adds: Mapping[int, int], when: int) -> tuple[Counts, list[int]]:
        """These counts with ``adds[row]`` more accesses of each row, last at ``when``; and
        the rows' new counts, in ``adds``' order. The arrays are copied only once more than
        :data:`COUNTED_MAX` rows have been counted since they were."""
        access, _ = self.many(list(adds))
        now = [count + n for count, n in zip(access, adds.values(), strict=True)]
        counted = dict(self.counted)
        counted.update((row, (count, when)) for row, count in zip(adds, now, strict=True))
        out = Counts(self.access, self.last, counted)
        if len(counted) > COUNTED_MAX:
            out = Counts.of(*out.arrays())
        return out, now

    def kept(self, keep: npt.NDArray[np.bool_]) -> Counts:
        """The rows ``keep`` marks, renumbered."""
        access, last = self.arrays()
        return Counts.of(access[keep], last[keep])

    def extended(self, access: Int64Array, last: Int64Array) -> Counts:
        """These rows followed by rows with ``access`` and ``last``."""
        mine = self.arrays()
        return Counts.of(np.concatenate([mine[0], access]), np.concatenate([mine[1], last]))


class Decoded:
    """Memories built from rows, by id, and rows found by a search without building their
    memories (``store/found.py``: their fields, read once, and their vectors); shared by
    the readers of one snapshot. The two together hold at most :data:`DECODED_MAX`."""

    def __init__(
        self,
        entries: dict[str, Memory] | None = None,
        found: dict[str, MemoryFields] | None = None,
    ) -> None:
        self._entries: dict[str, Memory] = entries if entries is not None else {}
        self._found: dict[str, MemoryFields] = found if found is not None else {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries) + len(self._found)

    def get(self, memory_id: str) -> Memory | None:
        """The memory built for this id, if kept."""
        return self._entries.get(memory_id)

    def get_many(self, ids: Iterable[str]) -> list[Memory | None]:
        """:meth:`get` of each of ``ids``."""
        entries = self._entries
        return [entries.get(memory_id) for memory_id in ids]

    def fields_many(self, ids: Iterable[str]) -> list[MemoryFields | None]:
        """The memory built or the row found for each of ``ids``, if kept."""
        entries, found = self._entries, self._found
        return [entries.get(memory_id) or found.get(memory_id) for memory_id in ids]

    def keep(self, memory: Memory) -> Memory:
        """Keep ``memory``; the one kept for its id (another thread may have been first).
        A row found for it is no longer kept: the memory has its fields."""
        with self._lock:
            self._make_room()
            self._found.pop(memory.id, None)
            return self._entries.setdefault(memory.id, memory)

    def keep_many(self, memories: Sequence[Memory]) -> list[Memory]:
        """:meth:`keep` of each of ``memories``, under one hold of the lock."""
        with self._lock:
            out = []
            for memory in memories:
                self._make_room()  # may replace both tables: read them after it
                self._found.pop(memory.id, None)
                out.append(self._entries.setdefault(memory.id, memory))
            return out

    def keep_found(self, found: Sequence[MemoryFields]) -> None:
        """Keep these rows found (their memories not built) for the next searches."""
        with self._lock:
            self._make_room(len(found))
            kept = self._found
            for fields in found:
                kept.setdefault(fields.id, fields)

    def _make_room(self, more: int = 1) -> None:
        """When ``more`` would not fit, drop the older half of what is kept, or all of it if
        that is not room enough (the lock held). The tables are replaced, not changed: a
        reader holding one (``get`` takes no lock) reads it as it was."""
        if len(self._entries) + len(self._found) + more <= DECODED_MAX:
            return
        self._entries, self._found = _newer_half(self._entries), _newer_half(self._found)
        if len(self._entries) + len(self._found) + more > DECODED_MAX:
            self._entries, self._found = {}, {}

    def carried(self, drop: Iterable[str] = (), put: Mapping[str, Memory] | None = None) -> Decoded:
        """A copy for the next snapshot: ``drop`` left out, ``put`` set (its rows found
        left out: they were found with their former values)."""
        with self._lock:
            # dict.copy(), not dict(...): a dict with entries removed (every search keeps
            # rows, every counted use drops some) is copied key by key by dict(...), ~0.7 ms
            # for a full cache of 10,000 on every context(); .copy() clones its table
            entries, found = self._entries.copy(), self._found.copy()
        for memory_id in drop:
            entries.pop(memory_id, None)
            found.pop(memory_id, None)
        if put:
            entries.update(put)
            for memory_id in put:
                found.pop(memory_id, None)
        return Decoded(entries, found)


def _newer_half(kept: dict[str, _V]) -> dict[str, _V]:
    """The later-inserted half of ``kept`` in a new table (a compact one: ``carried``'s
    ``dict.copy()`` clones a table without holes as one block)."""
    return dict(islice(kept.items(), len(kept) // 2, None))


@dataclass(frozen=True, eq=False)
class Rows:
    """The memories of ``len(source)`` rows: row ``i`` is row ``source[i]`` of ``base``,
    or (``source[i] == -1``) the object ``objects[id]``; its access count and last access
    (microseconds) are ``counts.one(i)`` either way."""

    base: Columns | None
    source: Int64Array
    objects: Mapping[str, Memory]
    counts: Counts
    decoded: Decoded

    @classmethod
    def of_objects(cls, memories: Sequence[Memory]) -> Rows:
        """Rows held as these objects."""
        n = len(memories)
        return cls(
            base=None,
            source=np.full(n, -1, dtype=np.int64),
            objects={m.id: m for m in memories},
            counts=Counts.of(
                np.fromiter((m.access_count for m in memories), np.int64, n),
                np.fromiter((micros(m.last_accessed_at) for m in memories), np.int64, n),
            ),
            decoded=Decoded(),
        )

    @classmethod
    def of_columns(cls, base: Columns, access: Int64Array, last: Int64Array) -> Rows:
        """Every row of ``base``, in order, with these access counts."""
        source = np.arange(len(base), dtype=np.int64)
        return cls(base, source, {}, Counts.of(access, last), Decoded())

    def __len__(self) -> int:
        return len(self.source)

    def memory(self, row: int, memory_id: str, embedding: Callable[[], Vector | None]) -> Memory:
        """The memory of ``row`` (whose id is ``memory_id``; ``embedding()`` gives its
        vector if it is built from ``base``)."""
        found = self.decoded.get(memory_id)
        if found is not None:
            return found
        at = int(self.source[row])
        count, last = self.counts.one(row)
        if at >= 0:
            assert self.base is not None
            memory = self.base.memory(at, embedding(), count, last)
        else:
            memory = self.objects[memory_id]
            if memory.access_count != count or micros(memory.last_accessed_at) != last:
                memory = with_access(memory, count, from_micros(last))
        return self.decoded.keep(memory)

    def content(self, row: int, memory_id: str) -> str:
        """The text of ``row`` (without building its memory)."""
        at = int(self.source[row])
        if at >= 0:
            assert self.base is not None
            return self.base.content[at]
        return self.objects[memory_id].content

    def contents(self, ids: Sequence[str]) -> list[str]:
        """Every row's text, in order (``ids``: the rows' ids)."""
        if self.base is not None and not self.objects and _is_range(self.source, len(self.base)):
            return self.base.content.all()
        return [self.content(row, memory_id) for row, memory_id in enumerate(ids)]

    def contents_digest(self) -> bytes | None:
        """:func:`~engrain.store.columns.texts_digest` of every row's text, if known
        without reading them: the rows are the base's, in order."""
        if self.base is not None and not self.objects and _is_range(self.source, len(self.base)):
            return self.base.content_digest
        return None

    def patched(self, changed: Mapping[int, Memory]) -> Rows:
        """These rows replaced by these memories."""
        source = self.source.copy()
        access, last = self.counts.arrays()
        objects = dict(self.objects)
        for row, memory in changed.items():
            source[row] = -1
            objects[memory.id] = memory
            access[row] = memory.access_count
            last[row] = micros(memory.last_accessed_at)
        drop = [m.id for m in changed.values()]
        return Rows(self.base, source, objects, Counts.of(access, last),
                    self.decoded.carried(drop))  # fmt: skip

    def extended(self, more: Sequence[Memory]) -> Rows:
        """These rows followed by ``more`` (held as objects)."""
        added = Rows.of_objects(more)
        return Rows(
            self.base,
            np.concatenate([self.source, added.source]),
            {**self.objects, **added.objects},
            self.counts.extended(added.counts.access, added.counts.last),
            self.decoded.carried([m.id for m in more]),
        )

    def without(self, keep: npt.NDArray[np.bool_], gone: Sequence[str]) -> Rows:
        """The rows kept (``gone``: the ids of the others)."""
        objects = {i: m for i, m in self.objects.items() if i not in set(gone)}
        return Rows(self.base, self.source[keep], objects, self.counts.kept(keep),
                    self.decoded.carried(gone))  # fmt: skip

    def touched(self, counts: Mapping[int, tuple[str, int]], at: datetime) -> Rows:
        """One access more per count: ``counts`` maps a row to its id and its number of
        accesses; the last access of each becomes ``at``. Neither the access arrays
        (:meth:`Counts.added`) nor anything else of every row is copied."""
        when = micros(at)
        now, new = self.counts.added({row: n for row, (_, n) in counts.items()}, when)
        moment = from_micros(when)
        put: dict[str, Memory] = {}
        ids = [memory_id for memory_id, _ in counts.values()]
        kept_now = self.decoded.get_many(ids)
        for memory_id, count, kept in zip(ids, new, kept_now, strict=True):
            if kept is not None:
                put[memory_id] = with_access(kept, count, moment)
        # a row found is dropped: its count is the one it was found with
        return Rows(self.base, self.source, self.objects, now,
                    self.decoded.carried(drop=ids, put=put))  # fmt: skip

    def recounted(self, access: Int64Array, last: Int64Array, changed: Iterable[str]) -> Rows:
        """These rows with these access counts and last accesses (another process counted
        uses; ``changed``: the ids whose counts differ, whose built memories are dropped)."""
        return Rows(self.base, self.source, self.objects, Counts.of(access, last),
                    self.decoded.carried(drop=changed))  # fmt: skip


def with_access(memory: Memory, count: int, last: datetime | None) -> Memory:
    """A copy of ``memory`` with this access count and last access."""
    # dataclasses.replace re-runs __init__: ~10x slower, and a context touches 100 rows;
    # copy.copy goes through __reduce_ex__ (~4x slower than filling a new object's fields)
    if not _DIRECT or type(memory) is not Memory:
        touched = copy.copy(memory)
        object.__setattr__(touched, "access_count", count)
        object.__setattr__(touched, "last_accessed_at", last)
        return touched
    touched = object.__new__(Memory)
    fields = touched.__dict__
    fields.update(memory.__dict__)
    fields["access_count"] = count
    fields["last_accessed_at"] = last
    return touched


#: Whether a ``Memory`` is copied by filling a new object's ``__dict__`` (what ``copy.copy``
#: does for it, through ``__reduce_ex__``): a plain dataclass without ``__slots__`` or its
#: own copy or pickle methods.
_DIRECT = "__slots__" not in vars(Memory) and not any(
    name in vars(Memory)
    for name in ("__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")
)


def _is_range(source: Int64Array, n: int) -> bool:
    return len(source) == n and bool((source == np.arange(n)).all())


class RowsView(Mapping[str, Memory]):
    """A working set's memories by id, built on access (``memory(row)`` builds one)."""

    def __init__(self, position: Mapping[str, int], memory: Callable[[int], Memory]) -> None:
        self._position = position
        self._memory = memory

    def __getitem__(self, memory_id: str) -> Memory:
        return self._memory(self._position[memory_id])

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._position

    def __iter__(self) -> Iterator[str]:
        return iter(self._position)

    def __len__(self) -> int:
        return len(self._position)
