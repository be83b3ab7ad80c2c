"""Rows → memories on PostgreSQL (``store/postgres/codec.py``): every stored enum value
decodes to its member (looked up by value, not by calling the enum class), and pgvector's
binary form decodes to a float32 array of the same bits that owns its memory."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from engrain.model import Kind, Memory, MemoryType, Provenance

pytest.importorskip("psycopg")
pytest.importorskip("pgvector")
codec = pytest.importorskip("engrain.store.postgres.codec")

CREATED = datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))


def _row(**values: Any) -> tuple[Any, ...]:
    """A row as :data:`codec.SELECT_COLUMNS` reads it, ``values`` by column name."""
    row: dict[str, Any] = {
        "id": "m1", "user_id": "u", "project": "p", "content": "text",
        "memory_type": "semantic", "kind": "fact", "domains": ["work"], "session_id": None,
        "created_at": CREATED, "updated_at": CREATED, "event_at": None, "key": None,
        "importance": 1.0, "confidence": 0.8, "usefulness": 0.5, "access_count": 3,
        "last_accessed_at": CREATED, "pinned": False, "muted": False, "promoted_at": None,
        "compressed": False, "compression_source": False, "source_session_id": None,
        "provenance": codec._NO_PROVENANCE, "content_hash": "h", "embedding": None,
        "superseded_by": None, "content_tokens": 1,
    }  # fmt: skip
    row.update(values)
    return tuple(row[c] for c in codec.COLUMNS)


@pytest.mark.parametrize("value", [t.value for t in MemoryType])
def test_every_memory_type_decodes_to_its_member(value: str) -> None:
    assert codec.from_row(_row(memory_type=value)).memory_type is MemoryType(value)


@pytest.mark.parametrize("value", [k.value for k in Kind])
def test_every_kind_decodes_to_its_member(value: str) -> None:
    assert codec.from_row(_row(kind=value)).kind is Kind(value)


def test_an_unknown_stored_value_is_refused() -> None:
    with pytest.raises(KeyError):
        codec.from_row(_row(kind="no such kind"))
    with pytest.raises(KeyError):
        codec.from_row(_row(memory_type="no such type"))


def test_a_row_decodes_to_the_memory_it_stores() -> None:
    vector = np.arange(4, dtype=np.float32)
    m = codec.from_row(_row(embedding=vector, event_at=CREATED, domains=["a", "b"]))
    assert m == Memory(
        id="m1", user_id="u", project="p", content="text", memory_type=MemoryType.SEMANTIC,
        kind=Kind.FACT, domains=("a", "b"), created_at=CREATED.astimezone(UTC),
        updated_at=CREATED.astimezone(UTC), event_at=CREATED.astimezone(UTC),
        access_count=3, last_accessed_at=CREATED.astimezone(UTC), provenance=Provenance(),
        content_hash="h",
    )  # fmt: skip
    assert m.created_at.tzinfo is UTC and m.embedding is vector and m.content_tokens == 1


def test_the_vector_loader_keeps_every_bit_in_an_array_of_its_own() -> None:
    values = np.array(
        [0.0, -0.0, 1.0, -1.5, np.float32(1e-45), np.finfo(np.float32).max, np.pi, np.inf],
        dtype=np.float32,
    )
    data = bytearray(struct.pack(">HH", len(values), 0) + values.astype(">f4").tobytes())
    loaded = codec._VectorLoader(0).load(memoryview(data))
    assert loaded.dtype == np.float32 and loaded.tobytes() == values.tobytes()
    data[4:8] = b"\x00\x00\x00\x00"  # the wire buffer reused: the array must not change
    assert loaded.tobytes() == values.tobytes() and loaded.flags.writeable


def test_a_row_read_without_its_vector_takes_the_one_given() -> None:
    held = np.ones(4, dtype=np.float32)
    bare = codec.from_row(_row(embedding=None), held)
    assert bare.embedding is held and bare == codec.from_row(_row(embedding=None))
    own = np.zeros(4, dtype=np.float32)
    assert codec.from_row(_row(embedding=own)).embedding is own  # none given: the row's
