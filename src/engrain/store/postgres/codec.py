"""Rows ↔ :class:`~engrain.model.Memory`, and numpy vectors ↔ pgvector's binary format:
the one place that knows how a memory is laid out in the ``memories`` and ``access``
tables."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pgvector.psycopg import register_vector
from psycopg import Connection
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format

from engrain.model import Kind, Memory, MemoryType, Provenance, Vector, as_utc
from engrain.store import built
from engrain.store.base import MEMORY_COLUMNS, KeyRecord

Conn = Connection[tuple[Any, ...]]

#: ``hnsw.ef_search`` for every connection: the candidate list of one index scan of a
#: large graph (a search of a smaller graph, or for more rows, sets its own for itself:
#: ``EF_BY_GRAPH_ROWS``, ``EF_PER_ROW``; ``bench/pg_scale.py`` measures recall@50 against
#: exact search by this value).
EF_SEARCH = 400

COLUMNS = MEMORY_COLUMNS
#: Kept in the narrow ``access`` table, not in ``memories`` (see the package docstring).
ACCESS_COLUMNS = ("access_count", "last_accessed_at")


def _select_expression(column: str) -> str:
    if column == "access_count":
        return "coalesce(a.access_count, 0)"
    if column == "last_accessed_at":
        return "a.last_accessed_at"
    # Provenance read as text: json.loads of a str is faster than psycopg's loader of a
    # binary json value, and the empty provenance skips parsing (5,000 rows: 200 → 95 ms).
    if column == "provenance":
        return "m.provenance::text"
    return f"m.{column}"


#: Every column of a memory, over ``memories m`` :data:`WITH_ACCESS`.
SELECT_COLUMNS = ", ".join(_select_expression(c) for c in COLUMNS)
WITH_ACCESS = "LEFT JOIN access a ON a.user_id = m.user_id AND a.id = m.id"
#: The same columns for a bounded set of memories (a search's k, BM25's best, ids asked
#: for): one primary-key probe of ``access`` per memory. As a plain join the planner
#: hashes the user's whole ``access`` table, which grows with every memory ever counted
#: (5,763 rows after a few hundred contexts at 100,000 memories: 1.5 ms against 0.8 ms
#: for 100 rows, and linear in the table).
EACH_ACCESS = (
    "LEFT JOIN LATERAL (SELECT x.access_count, x.last_accessed_at, x.xmin FROM access x "
    "WHERE x.user_id = m.user_id AND x.id = m.id LIMIT 1) a ON true"
)
#: The row version of a memory: new on any change of its row or of its access counts.
VERSION = "m.xmin::text || '/' || coalesce(a.xmin::text, '')"
INSERT_COLUMNS = (*(c for c in COLUMNS if c not in ACCESS_COLUMNS), "doc_length")


class _VectorDumper(Dumper):
    """numpy float32 → pgvector's binary format (dimension, unused, big-endian floats)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        values = np.asarray(obj, dtype=">f4")
        return struct.pack(">HH", values.shape[0], 0) + values.tobytes()


#: pgvector's element type on the wire (a dtype object: numpy parses a string form on every
#: call, ~0.7 µs of a vector's ~2.7 µs).
_WIRE = np.dtype(">f4")


class _VectorLoader(Loader):
    """pgvector's binary format → a numpy float32 array (what every store returns)."""

    format = Format.BINARY

    def load(self, data: Any) -> Vector:
        return np.frombuffer(data, dtype=_WIRE, offset=4).astype(np.float32)


def configure(conn: Conn) -> None:
    """Run on every new pooled connection: vector types, UTC, search settings."""
    register_vector(conn)
    info = conn.adapters.types.get("vector")
    assert info is not None
    # A subclass per connection: the type's oid differs between databases.
    dumper = type("_Dumper", (_VectorDumper,), {"oid": info.oid})
    conn.adapters.register_dumper(np.ndarray, dumper)
    conn.adapters.register_loader(info.oid, _VectorLoader)
    conn.execute(
        "SET TIME ZONE 'UTC'; "
        f"SET hnsw.ef_search = {EF_SEARCH}; "
        "SET hnsw.iterative_scan = relaxed_order; "
        # The best plan depends on how many memories *this* user has: plan every query
        # with its own parameters instead of a generic plan cached after five calls.
        "SET plan_cache_mode = force_custom_plan"
    )


def utc(value: datetime | None) -> datetime | None:
    """``value`` as an aware UTC time (``None`` stays ``None``)."""
    return None if value is None else as_utc(value)


def to_row(m: Memory, doc_length: int) -> tuple[Any, ...]:
    """The values of :data:`INSERT_COLUMNS` for ``m`` (``doc_length``: its token count)."""
    return (
        m.id, m.user_id, m.project, m.content, m.memory_type.value, m.kind.value,
        list(m.domains), m.session_id, utc(m.created_at), utc(m.updated_at),
        utc(m.event_at), m.key, float(m.importance), float(m.confidence),
        float(m.usefulness), bool(m.pinned), bool(m.muted), utc(m.promoted_at),
        bool(m.compressed), bool(m.compression_source),
        m.source_session_id, json.dumps(m.provenance.to_dict()), m.content_hash,
        None if m.embedding is None else np.asarray(m.embedding, dtype=np.float32),
        m.superseded_by, m.content_tokens, doc_length,
    )  # fmt: skip


#: Each enum member by its stored value: a dict lookup, where calling the enum class
#: (``Kind(value)``) costs ~1.2 µs in Python 3.11 — ~2.5 µs of a row's ~9, and a
#: ``context()`` at 100,000 memories decodes ~220 rows.
_MEMORY_TYPES = {t.value: t for t in MemoryType}
_KINDS = {k.value: k for k in Kind}


def from_row(r: Sequence[Any], embedding: Vector | None = None) -> Memory:
    """The memory of a row read with :data:`SELECT_COLUMNS` first; with ``embedding``, that
    vector instead of the row's (a row read without it: no second tuple to build).

    Its fields are filled in directly where the class allows it (``built.DIRECT``: every
    field an ``__init__`` argument, no ``__post_init__``, no ``__slots__``), as SQLite's
    built memories are (``store/built.py``): the frozen dataclass's ``__init__`` sets each
    of the 28 through ``object.__setattr__``, ~8 of a row's ~14 µs, and a ``context()`` at
    100,000 memories decodes ~230 rows (docs/postgres.md, "Session 25 … (h6)"). The values,
    their order in the instance and the memory are those ``__init__`` would give."""
    fields = {
        "id": r[0], "user_id": r[1], "content": r[3], "memory_type": _MEMORY_TYPES[r[4]],
        "kind": _KINDS[r[5]], "created_at": r[8].astimezone(UTC),
        "updated_at": r[9].astimezone(UTC), "project": r[2], "domains": tuple(r[6]),
        "session_id": r[7], "event_at": _from_ts(r[10]), "key": r[11], "importance": r[12],
        "confidence": r[13], "usefulness": r[14], "access_count": r[15],
        "last_accessed_at": _from_ts(r[16]), "pinned": r[17], "muted": r[18],
        "promoted_at": _from_ts(r[19]), "compressed": r[20], "compression_source": r[21],
        "source_session_id": r[22], "superseded_by": r[26], "provenance": _provenance(r[23]),
        "content_hash": r[24], "embedding": r[25] if embedding is None else embedding,
        "content_tokens": r[27],
    }  # fmt: skip
    if not built.DIRECT:
        return Memory(**fields)
    memory: Memory = object.__new__(Memory)
    memory.__dict__.update(fields)
    return memory


#: The columns of ``api_keys``, in :class:`~engrain.store.base.KeyRecord`'s order.
KEY_COLUMNS = "id, digest, name, users, projects, admin, created_at, revoked_at"


def key_row(k: KeyRecord) -> tuple[Any, ...]:
    """The values of :data:`KEY_COLUMNS` for ``k``."""
    return (k.id, k.digest, k.name, list(k.users), list(k.projects), bool(k.admin),
            utc(k.created_at), utc(k.revoked_at))  # fmt: skip


def key_from_row(r: Sequence[Any]) -> KeyRecord:
    """The key of a row read with :data:`KEY_COLUMNS`."""
    return KeyRecord(
        id=r[0], digest=r[1], name=r[2], users=tuple(r[3]), projects=tuple(r[4]),
        admin=bool(r[5]), created_at=r[6].astimezone(UTC), revoked_at=_from_ts(r[7]),
    )  # fmt: skip


_NO_PROVENANCE = json.dumps(Provenance().to_dict())


def _provenance(text: str) -> Provenance:
    return Provenance() if text == _NO_PROVENANCE else Provenance.from_dict(json.loads(text))


def _from_ts(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)
