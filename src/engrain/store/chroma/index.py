"""The Chroma side: one collection holding every user's embedded memories.

Each record is one memory: its id is ``[user_id, memory_id]`` as JSON (unambiguous whatever
the ids contain), its document the memory's text, its embedding the vector engrain computed,
and its metadata the fields :class:`~engrain.store.base.MemoryFilter` filters on, so Chroma
filters before it takes the nearest ``k``. The collection is created in cosine space with no
embedding function: Chroma never embeds anything and never downloads a model.

Every client call goes through :func:`_call`, which turns whatever the client raises (its
own errors, ``ValueError`` for a bad dimension, transport errors of the HTTP client) into a
:class:`~engrain.errors.StoreError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import chromadb
import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT

from engrain.errors import StoreError
from engrain.model import Memory, Vector
from engrain.store.base import MemoryFilter
from engrain.store.chroma.url import ChromaTarget

T = TypeVar("T")

#: Records per client call when the client reports no limit of its own.
DEFAULT_BATCH = 1000


def _call(what: str, target: ChromaTarget, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except StoreError:
        raise
    except Exception as exc:  # the client's failures span its own, ValueError and httpx's
        raise StoreError(f"{target.describe()}: {what} failed: {exc}") from exc


def connect(target: ChromaTarget) -> ClientAPI:
    """A client for ``target``; :class:`StoreError` if it cannot start or reach the server.

    Chroma's default settings, on purpose: an application holding its own client on the
    same directory shares one Chroma system only if the settings are equal (Chroma refuses
    a second one), and its product telemetry is a no-op in the versions engrain supports."""
    if target.path is not None:
        path = target.path
        return _call("opening", target, lambda: chromadb.PersistentClient(path))
    assert target.host is not None and target.port is not None
    host, port = target.host, target.port
    return _call(
        "connecting",
        target,
        lambda: chromadb.HttpClient(
            host=host,
            port=port,
            ssl=target.ssl,
            tenant=target.tenant or DEFAULT_TENANT,
            database=target.database or DEFAULT_DATABASE,
        ),
    )


def record_id(user_id: str, memory_id: str) -> str:
    """The Chroma record id of a user's memory."""
    return json.dumps([user_id, memory_id], ensure_ascii=False)


def _memory_id(record: str) -> str:
    return str(json.loads(record)[1])


def metadata(memory: Memory) -> dict[str, str | int | float | bool]:
    """What Chroma keeps beside a memory's vector: the fields searches filter on. Chroma
    has no null, so an absent project, session or key is an absent entry."""
    meta: dict[str, str | int | float | bool] = {
        "user_id": memory.user_id,
        "memory_id": memory.id,
        "memory_type": memory.memory_type.value,
        "kind": memory.kind.value,
        "importance": float(memory.importance),
        "pinned": memory.pinned,
        "muted": memory.muted,
        "compressed": memory.compressed,
        "superseded": memory.superseded_by is not None,
        "updated_at": memory.updated_at.isoformat(),
    }
    for name, value in (
        ("project", memory.project), ("session_id", memory.session_id), ("key", memory.key)
    ):  # fmt: skip
        if value is not None:
            meta[name] = value
    return meta


def where(user_id: str, flt: MemoryFilter) -> dict[str, Any]:
    """The Chroma ``where`` clause selecting the user's records that pass ``flt``."""
    terms: list[dict[str, Any]] = [{"user_id": user_id}]
    for name, value in (
        ("project", flt.project), ("session_id", flt.session_id), ("key", flt.key)
    ):  # fmt: skip
        if value is not None:
            terms.append({name: value})
    if flt.memory_types is not None:
        terms.append({"memory_type": {"$in": [t.value for t in flt.memory_types] or [""]}})
    if flt.kinds is not None:
        terms.append({"kind": {"$in": [k.value for k in flt.kinds] or [""]}})
    for name, include in (
        ("compressed", flt.include_compressed), ("muted", flt.include_muted),
        ("superseded", flt.include_superseded),
    ):  # fmt: skip
        if not include:
            terms.append({name: False})
    if flt.min_importance is not None:
        terms.append({"importance": {"$gte": float(flt.min_importance)}})
    if flt.pinned is not None:
        terms.append({"pinned": flt.pinned})
    return terms[0] if len(terms) == 1 else {"$and": terms}


class ChromaIndex:
    """The collection of one engrain store, and the few operations the store needs."""

    def __init__(self, target: ChromaTarget, client: ClientAPI) -> None:
        self.target = target
        self._client = client
        self._collection: Collection = _call(
            "opening the collection",
            target,
            lambda: client.get_or_create_collection(
                target.collection,
                embedding_function=None,
                configuration={"hnsw": {"space": "cosine"}},
            ),
        )
        # the raw JSON: the parsed configuration warns about the absent embedding function
        hnsw = (self._collection.configuration_json or {}).get("hnsw") or {}
        if hnsw.get("space", "cosine") != "cosine":
            raise StoreError(
                f"{target.describe()} uses {hnsw.get('space')!r} distance, not cosine: "
                "engrain ranks by cosine similarity; name another collection"
            )
        limit = _call("asking the batch size", target, client.get_max_batch_size)
        self._batch = max(1, int(limit or DEFAULT_BATCH))

    def upsert(self, memories: Sequence[Memory]) -> None:
        """Put these memories (each with an embedding) in the collection, by id."""
        for start in range(0, len(memories), self._batch):
            part = memories[start : start + self._batch]
            _call(
                "writing vectors",
                self.target,
                lambda part=part: self._collection.upsert(  # type: ignore[misc]
                    ids=[record_id(m.user_id, m.id) for m in part],
                    embeddings=np.stack([_vector(m.embedding) for m in part]),
                    metadatas=[metadata(m) for m in part],
                    documents=[m.content for m in part],
                ),
            )

    def delete(self, user_id: str, memory_ids: Iterable[str]) -> None:
        """Remove these memories of the user (ids Chroma does not hold are ignored)."""
        records = [record_id(user_id, i) for i in memory_ids]
        for start in range(0, len(records), self._batch):
            part = records[start : start + self._batch]
            _call(
                "deleting vectors",
                self.target,
                lambda part=part: self._collection.delete(ids=part),  # type: ignore[misc]
            )

    def memory_ids(self, user_id: str) -> set[str]:
        """Every memory id the collection holds for the user."""
        found: set[str] = set()
        offset = 0
        while True:
            page = _call(
                "listing vectors",
                self.target,
                lambda offset=offset: self._collection.get(  # type: ignore[misc]
                    where={"user_id": user_id}, include=[], limit=self._batch, offset=offset
                ),
            )
            found.update(_memory_id(r) for r in page["ids"])
            if len(page["ids"]) < self._batch:
                return found
            offset += self._batch

    def nearest(self, user_id: str, vector: Vector, k: int, flt: MemoryFilter) -> list[str]:
        """The ids of the user's ``k`` memories nearest ``vector`` among those passing
        ``flt``, nearest first (Chroma's HNSW: approximate on large collections)."""
        found = _call(
            "searching",
            self.target,
            lambda: self._collection.query(
                query_embeddings=_vector(vector)[np.newaxis, :],
                n_results=k,
                where=where(user_id, flt),
                include=[],
            ),
        )
        return [_memory_id(r) for r in found["ids"][0]]

    def close(self) -> None:
        """Release the client (an embedded one stops when its last client closes)."""
        close = getattr(self._client, "close", None)
        if callable(close):
            _call("closing", self.target, close)


def _vector(vector: Vector | None) -> Vector:
    assert vector is not None  # only embedded memories reach the index
    return np.asarray(vector, dtype=np.float32)
