"""The SQLite store's rows: memories and API keys to and from the tuples its tables hold
(timestamps as ISO text, lists and provenance as JSON, vectors as float32 BLOBs), and the
statements that read them whole."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from engrain.model import Kind, Memory, MemoryType, Provenance, as_utc
from engrain.store import sqlite_uses
from engrain.store.base import KeyRecord

#: Whole memories (the row and its uses): filter with ``m.user_id``, ``m.id``.
SELECT = f"SELECT {sqlite_uses.SELECT_LIST} FROM {sqlite_uses.JOINED}"
#: The columns a ``memories`` row stores since 006 (the uses are in ``uses``).
ROW_COLUMNS = sqlite_uses.ROW_COLUMNS
#: Ids per ``IN (…)`` list: well under SQLite's default limit of 32,766 variables.
IN_CHUNK = 500
#: Reads rows through the store's connection: a statement and its parameters.
Read = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]


def dt(value: datetime | None) -> str | None:
    """A timestamp as the store keeps it: ISO text in UTC."""
    return None if value is None else as_utc(value).isoformat()


def parse(value: str | None) -> datetime | None:
    """A timestamp the store kept (:func:`dt`)."""
    return None if value is None else datetime.fromisoformat(value)


SELECT_KEYS = (
    "SELECT id, digest, name, users, projects, admin, created_at, revoked_at FROM api_keys"
)


def key_row(k: KeyRecord) -> tuple[Any, ...]:
    """An API key as its ``api_keys`` row."""
    return (
        k.id, k.digest, k.name, json.dumps(list(k.users)), json.dumps(list(k.projects)),
        int(k.admin), dt(k.created_at), dt(k.revoked_at),
    )  # fmt: skip


def key_from_row(r: tuple[Any, ...]) -> KeyRecord:
    """An API key from its row (:data:`SELECT_KEYS`)."""
    created = parse(r[6])
    assert created is not None
    return KeyRecord(
        id=r[0], digest=r[1], name=r[2], users=tuple(json.loads(r[3])),
        projects=tuple(json.loads(r[4])), admin=bool(r[5]), created_at=created,
        revoked_at=parse(r[7]),
    )  # fmt: skip


def to_row(m: Memory) -> tuple[Any, ...]:
    """A memory as a row of every column of ``base.MEMORY_COLUMNS`` (the uses' two
    included: ``sqlite_uses.stored`` leaves them out of the ``memories`` row)."""
    return (
        m.id, m.user_id, m.project, m.content, m.memory_type.value, m.kind.value,
        json.dumps(list(m.domains)), m.session_id, dt(m.created_at), dt(m.updated_at),
        dt(m.event_at), m.key, m.importance, m.confidence, m.usefulness, m.access_count,
        dt(m.last_accessed_at), int(m.pinned), int(m.muted), dt(m.promoted_at),
        int(m.compressed), int(m.compression_source), m.source_session_id,
        json.dumps(m.provenance.to_dict()), m.content_hash,
        None if m.embedding is None else np.asarray(m.embedding, dtype=np.float32).tobytes(),
        m.superseded_by, m.content_tokens,
    )  # fmt: skip


def from_row(r: tuple[Any, ...]) -> Memory:
    """A memory from a row read with :data:`SELECT`."""
    created, updated = parse(r[8]), parse(r[9])
    assert created is not None and updated is not None
    return Memory(
        id=r[0], user_id=r[1], project=r[2], content=r[3],
        memory_type=MemoryType(r[4]), kind=Kind(r[5]), domains=tuple(json.loads(r[6])),
        session_id=r[7], created_at=created, updated_at=updated, event_at=parse(r[10]),
        key=r[11], importance=r[12], confidence=r[13], usefulness=r[14], access_count=r[15],
        last_accessed_at=parse(r[16]), pinned=bool(r[17]), muted=bool(r[18]),
        promoted_at=parse(r[19]), compressed=bool(r[20]), compression_source=bool(r[21]),
        source_session_id=r[22], provenance=Provenance.from_dict(json.loads(r[23])),
        content_hash=r[24],
        embedding=None if r[25] is None else np.frombuffer(r[25], dtype=np.float32).copy(),
        superseded_by=r[26], content_tokens=r[27],
    )  # fmt: skip


def by_ids(read: Read, user_id: str, ids: Sequence[str]) -> list[Memory]:
    """The user's memories with these ids (read through ``read``), in the order given;
    unknown ids skipped."""
    if not ids:
        return []
    found: dict[str, Memory] = {}
    unique = list(dict.fromkeys(ids))
    for start in range(0, len(unique), IN_CHUNK):
        part = unique[start : start + IN_CHUNK]
        marks = ", ".join("?" for _ in part)
        for row in read(f"{SELECT} WHERE m.user_id = ? AND m.id IN ({marks})", (user_id, *part)):
            memory = from_row(row)
            found[memory.id] = memory
    return [found[i] for i in ids if i in found]
