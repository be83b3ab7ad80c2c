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


def _every_field_set() -> tuple[Any, ...]:
    """A row whose every column holds a value other than the field's default."""
    later = CREATED + timedelta(days=3)
    return _row(
        project="q", domains=["a", "b"], session_id="s", event_at=CREATED, key="k",
        importance=0.3, confidence=0.4, usefulness=0.9, access_count=7, last_accessed_at=later,
        pinned=True, muted=True, promoted_at=later, compressed=True, compression_source=True,
        source_session_id="s0", superseded_by="m0", content_hash="hh", content_tokens=9,
        provenance='{"turn_ids": ["t1", "t2"], "metadata": {"source": "chat"}}',
        embedding=np.arange(4, dtype=np.float32), memory_type="episodic", kind="event",
    )  # fmt: skip


@pytest.mark.parametrize("direct", [True, False])
def test_a_row_decodes_to_the_memory_its_init_would_make(
    monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    """Filled in directly (``built.DIRECT``) or through ``__init__``, a row's memory is the
    one ``Memory(**fields)`` makes: equal, every field the same value, in the same order."""
    from engrain.store import built

    monkeypatch.setattr(built, "DIRECT", direct)
    row = _every_field_set()
    got = codec.from_row(row)
    want = Memory(**{name: getattr(got, name) for name in vars(got)})
    assert type(got) is Memory and got == want
    assert list(vars(got)) == list(vars(want))
    assert got.provenance == Provenance(("t1", "t2"), {"source": "chat"})
    assert got.created_at.tzinfo is UTC and got.promoted_at == (CREATED + timedelta(days=3))
    assert got.embedding is row[codec.COLUMNS.index("embedding")]
    with pytest.raises(AttributeError):  # still frozen
        got.content = "changed"  # type: ignore[misc]


def test_a_row_decodes_without_the_dataclass_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row's memory is filled in directly, not through the frozen dataclass's
    ``__init__`` (28 ``object.__setattr__`` calls, ~8 of a row's ~14 µs): a ``context()``
    at 100,000 memories decodes ~230 rows."""
    made: list[int] = []
    init = Memory.__init__

    def counted(self: Memory, *args: Any, **kwargs: Any) -> None:
        made.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Memory, "__init__", counted)
    memories = [codec.from_row(_every_field_set()) for _ in range(3)]
    assert made == [] and memories[0] == memories[1] == memories[2]
