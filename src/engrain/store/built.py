"""Memories built from a working set's columns for the rows a call returns (issue 18).

A ``context()`` call of a user with 100,000 memories builds ~150 to 400 ``Memory`` objects
from the columns (``store/columns.py``): the pool, the learnings and the lexical matches
that are not kept built yet. Built one field at a time that cost ~44 µs a memory on a busy
2-core machine, 40 % of it in the frozen dataclass's ``__init__`` (28 keyword arguments,
each set through ``object.__setattr__``) and most of the rest in reading each column row by
row. :func:`memories` reads each column once for all the rows (codes and offsets as lists)
and fills a new ``Memory``'s fields directly when the class allows it: every field is an
``__init__`` argument, there is no ``__post_init__`` and no ``__slots__``, so ``__init__``
would only have stored the values given (nothing is validated or converted there; the
store's rows are the memories it wrote). Otherwise, or if a field is missing, it calls
``__init__``. ``tests/test_columnar.py`` checks that both give equal memories.

:func:`rows_memories` builds the memories of a working set's rows with it: the kept
memories reused, the others' texts read in one query, each built memory kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import numpy as np

from engrain.model import Kind, Memory, MemoryType, Vector
from engrain.store.columns import _EPOCH, NO_COUNT, NO_TIME, Codes, Columns, Strings
from engrain.store.rows import Rows

_V = TypeVar("_V")
_MISSING: Any = object()
_TYPES = tuple(MemoryType)
_KINDS = tuple(Kind)
_NAMES = tuple(f.name for f in dataclasses.fields(Memory))
#: Whether a memory may be made by filling its fields (see the module docstring).
DIRECT = (
    all(f.init for f in dataclasses.fields(Memory))
    and not hasattr(Memory, "__post_init__")
    and "__slots__" not in vars(Memory)
)


def memories(
    columns: Columns,
    rows: Sequence[int],
    embeddings: Sequence[Vector | None],
    access_counts: Sequence[int],
    last_accessed: Sequence[int],
    ids: Sequence[str] | None = None,
) -> list[Memory]:
    """:meth:`~engrain.store.columns.Columns.memories` (the same memories), each column
    read once for all ``rows``. ``ids``: the rows' memory ids if the caller has them
    (``columns.ids`` of ``rows``), so they are not decoded again."""
    at = np.asarray(rows, dtype=np.int64)
    listed = at.tolist()
    content = columns.content
    values: dict[str, list[Any]] = {
        "id": strings_at(columns.ids, at) if ids is None else list(ids),
        "content": [content[row] for row in listed],
        "memory_type": [_TYPES[t] for t in columns.memory_type[at].tolist()],
        "kind": [_KINDS[k] for k in columns.kind[at].tolist()],
        "created_at": _times(columns.created[at].tolist()),
        "updated_at": _times(columns.updated[at].tolist()),
        "project": _codes(columns.project, at),
        "domains": _by_code(columns.domains.codes[at].tolist(), listed, columns._domain),
        "session_id": _codes(columns.session_id, at),
        "event_at": _times(columns.event[at].tolist()),
        "key": _codes(columns.key, at),
        "importance": columns.importance[at].tolist(),
        "confidence": columns.confidence[at].tolist(),
        "usefulness": columns.usefulness[at].tolist(),
        "access_count": list(access_counts),
        "last_accessed_at": _times(list(last_accessed)),
        "pinned": columns.pinned[at].tolist(),
        "muted": columns.muted[at].tolist(),
        "promoted_at": _times(columns.promoted[at].tolist()),
        "compressed": columns.compressed[at].tolist(),
        "compression_source": columns.compression_source[at].tolist(),
        "source_session_id": _codes(columns.source_session_id, at),
        "superseded_by": _codes(columns.superseded_by, at),
        "provenance": _by_code(
            columns.provenance.codes[at].tolist(), listed, columns._provenance_of
        ),
        "content_hash": strings_at(columns.content_hash, at),
        "content_tokens": [
            None if c == NO_COUNT else c for c in columns.content_tokens[at].tolist()
        ],
        "embedding": list(embeddings),
        "user_id": [columns.user_id] * len(listed),
    }
    names = [name for name in _NAMES if name in values]
    in_order = [values[name] for name in names]
    if not DIRECT or len(names) != len(_NAMES):
        return [Memory(**dict(zip(names, row, strict=True))) for row in zip(*in_order, strict=True)]
    out = []
    for row in zip(*in_order, strict=True):
        memory: Memory = object.__new__(Memory)
        memory.__dict__.update(zip(names, row, strict=True))
        out.append(memory)
    return out


def rows_memories(
    rows: Rows,
    positions: Sequence[int],
    ids: Sequence[str],
    embedding: Callable[[int], Vector | None],
) -> list[Memory]:
    """:meth:`~engrain.store.rows.Rows.memories` (the memory of each of ``positions``, whose
    ids are ``ids``; ``embedding(row)`` gives a loaded row's vector) with :func:`memories`
    building those of loaded rows that are not kept built."""
    out: list[Memory | None] = rows.decoded.get_many(ids)
    todo = [i for i, found in enumerate(out) if found is None]
    if not todo:
        return [m for m in out if m is not None]
    sources = rows.source[[positions[i] for i in todo]].tolist()
    from_base = [i for i, at in zip(todo, sources, strict=True) if at >= 0]
    for i, at in zip(todo, sources, strict=True):
        if at < 0:
            out[i] = rows.memory(positions[i], ids[i], lambda: None)
    if from_base:
        assert rows.base is not None
        picked = [positions[i] for i in from_base]
        source = [at for at in sources if at >= 0]
        prefetch = getattr(rows.base.content, "prefetch", None)
        if prefetch is not None:  # texts kept in the store: one read for all of them
            prefetch(source)
        access, last = rows.counts.many(picked)
        vectors = [embedding(row) for row in picked]
        given = [ids[i] for i in from_base]
        built = memories(rows.base, source, vectors, access, last, given)
        for i, memory in zip(from_base, rows.decoded.keep_many(built), strict=True):
            out[i] = memory
    return [m for m in out if m is not None]


def strings_at(strings: Strings, at: np.ndarray) -> list[str]:
    """Entries ``at`` of ``strings`` (``[strings[i] for i in at]``, the offsets read at
    once)."""
    blob, starts, ends = strings.blob, strings.at[at].tolist(), (strings.at[at + 1] - 1).tolist()
    spans = zip(starts, ends, strict=True)
    return [blob[start:end].decode("utf-8", "surrogatepass") for start, end in spans]


def _codes(codes: Codes, at: np.ndarray) -> list[str | None]:
    """Entries ``at`` of ``codes`` (``None`` where missing)."""
    values = codes.values
    return [values[code] if code >= 0 else None for code in codes.codes[at].tolist()]


def _times(values: list[int]) -> list[datetime | None]:
    """:func:`~engrain.store.columns.from_micros` of each value (``timedelta(0, 0, v)`` is
    ``timedelta(microseconds=v)``, made without parsing keywords)."""
    epoch, delta, none = _EPOCH, timedelta, NO_TIME
    return [None if v == none else epoch + delta(0, 0, v) for v in values]


def _by_code(codes: list[int], rows: list[int], value: Callable[[int], _V]) -> list[_V]:
    """``[value(row) for row in rows]`` for a coded column whose value, for a row with a
    code, depends only on that code and is one object per code (``Columns._domain``,
    ``Columns._provenance_of``): ``value`` called once per distinct code (``codes``, the
    rows' codes), and for each row without one (a new default object each, as before)."""
    seen: dict[int, _V] = {}
    out = []
    for code, row in zip(codes, rows, strict=True):
        if code < 0:
            out.append(value(row))
            continue
        found = seen.get(code, _MISSING)
        if found is _MISSING:
            found = seen[code] = value(row)
        out.append(found)
    return out
