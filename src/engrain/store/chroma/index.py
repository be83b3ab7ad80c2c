"""The Chroma side: one collection per user holding the user's embedded memories.

One collection per user, not one for the store: a ``where`` on ``user_id`` makes Chroma
filter every record of the collection before its HNSW search (37 ms at 10,000 memories of
one user, against 1.7 ms unfiltered), while a user's own collection is searched as it is.
A collection is named from the URL's ``collection`` and a digest of the user id, with the
user id in its metadata. Each record is one memory: its id the memory id, its document the
memory's text, its embedding the vector engrain computed, and its metadata the fields
:class:`~engrain.store.base.MemoryFilter` filters on. Collections are created in cosine
space with no embedding function: Chroma never embeds anything and never downloads a model.

Every client call goes through :func:`_call`, which turns whatever the client raises (its
own errors, ``ValueError`` for a bad dimension, transport errors of the HTTP client) into a
:class:`~engrain.errors.StoreError`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import chromadb
import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT
from chromadb.errors import NotFoundError as ChromaNotFoundError

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


def collection_name(prefix: str, user_id: str) -> str:
    """The collection holding one user's memories: the URL's ``collection`` as a prefix and
    a digest of the user id (Chroma allows few characters in a name; the id is kept in the
    collection's metadata)."""
    return f"{prefix}-u-{hashlib.sha256(user_id.encode()).hexdigest()[:32]}"


def metadata(memory: Memory) -> dict[str, str | int | float | bool]:
    """What Chroma keeps beside a memory's vector: the fields searches filter on. Chroma
    has no null, so an absent project, session or key is an absent entry."""
    meta: dict[str, str | int | float | bool] = {
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


def where(flt: MemoryFilter) -> dict[str, Any] | None:
    """The Chroma ``where`` clause selecting the records that pass ``flt`` (``None``: all)."""
    terms: list[dict[str, Any]] = []
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
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else {"$and": terms}


class ChromaIndex:
    """The collections of one engrain store (one per user), and the few operations the
    store needs."""

    def __init__(self, target: ChromaTarget, client: ClientAPI) -> None:
        self.target = target
        self._client = client
        self._collections: dict[str, Collection] = {}
        limit = _call("asking the batch size", target, client.get_max_batch_size)
        self._batch = max(1, int(limit or DEFAULT_BATCH))

    def _collection(self, user_id: str, *, create: bool) -> Collection | None:
        """The user's collection (created if ``create``), or ``None`` if there is none.
        Handles are kept; an absent collection is asked for again next time (another
        process may create it)."""
        found = self._collections.get(user_id)
        if found is not None:
            return found
        name = collection_name(self.target.collection, user_id)
        if create:
            found = _call(
                "opening a collection",
                self.target,
                lambda: self._client.get_or_create_collection(
                    name,
                    embedding_function=None,
                    configuration={"hnsw": {"space": "cosine"}},
                    metadata={"engrain_user_id": user_id},
                ),
            )
        else:
            try:
                found = self._client.get_collection(name, embedding_function=None)
            except ChromaNotFoundError:
                return None
            except Exception as exc:  # see _call
                raise StoreError(f"{self.target.describe()}: opening {name} failed: {exc}") from exc
        # the raw JSON: the parsed configuration warns about the absent embedding function
        hnsw = (found.configuration_json or {}).get("hnsw") or {}
        if hnsw.get("space", "cosine") != "cosine":
            raise StoreError(
                f"{self.target.describe()}: {name} uses {hnsw.get('space')!r} distance, not "
                "cosine: engrain ranks by cosine similarity; name another collection"
            )
        self._collections[user_id] = found
        return found

    def _on(
        self, user_id: str, what: str, fn: Callable[[Collection], T], absent: T, *, create: bool
    ) -> T:
        """``fn`` on the user's collection (``absent`` if there is none and ``create`` is
        false). A collection deleted behind a kept handle (by another tool or process) is
        opened again once before the error counts."""
        for attempt in range(2):
            collection = self._collection(user_id, create=create)
            if collection is None:
                return absent
            try:
                return fn(collection)
            except ChromaNotFoundError as exc:
                self._collections.pop(user_id, None)
                if attempt:
                    raise StoreError(f"{self.target.describe()}: {what} failed: {exc}") from exc
            except Exception as exc:  # see _call
                raise StoreError(f"{self.target.describe()}: {what} failed: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def upsert(self, memories: Sequence[Memory]) -> None:
        """Put these memories (each with an embedding) in their users' collections."""
        by_user: dict[str, list[Memory]] = {}
        for memory in memories:
            by_user.setdefault(memory.user_id, []).append(memory)
        for user_id, mine in by_user.items():
            for start in range(0, len(mine), self._batch):
                part = mine[start : start + self._batch]
                self._on(user_id, "writing vectors", _putter(part), None, create=True)

    def delete(self, user_id: str, memory_ids: Sequence[str]) -> None:
        """Remove these memories of the user (ids Chroma does not hold are ignored)."""
        for start in range(0, len(memory_ids), self._batch):
            part = list(memory_ids[start : start + self._batch])
            self._on(user_id, "deleting vectors", _deleter(part), None, create=False)

    def memory_ids(self, user_id: str) -> set[str]:
        """Every memory id the collection holds for the user."""
        found: set[str] = set()
        offset = 0
        while True:
            none: list[str] = []
            page = self._on(
                user_id, "listing vectors", _lister(offset, self._batch), none, create=False
            )
            found.update(page)
            if len(page) < self._batch:
                return found
            offset += self._batch

    def nearest(
        self, user_id: str, vector: Vector, n: int, flt: MemoryFilter | None = None
    ) -> list[str]:
        """The ids of the user's ``n`` memories nearest ``vector`` (among those passing
        ``flt``, if given), nearest first (Chroma's HNSW: approximate on large
        collections)."""
        clause = None if flt is None else where(flt)
        query = _vector(vector)[np.newaxis, :]
        return self._on(
            user_id, "searching",
            lambda c: list(c.query(query_embeddings=query, n_results=n, where=clause,
                                   include=[])["ids"][0]),
            [], create=False,
        )  # fmt: skip

    def close(self) -> None:
        """Release the client (an embedded one stops when its last client closes)."""
        self._collections.clear()
        close = getattr(self._client, "close", None)
        if callable(close):
            _call("closing", self.target, close)


def _putter(part: Sequence[Memory]) -> Callable[[Collection], None]:
    def put(collection: Collection) -> None:
        collection.upsert(
            ids=[m.id for m in part],
            embeddings=np.stack([_vector(m.embedding) for m in part]),
            metadatas=[metadata(m) for m in part],
            documents=[m.content for m in part],
        )

    return put


def _deleter(ids: list[str]) -> Callable[[Collection], None]:
    def delete(collection: Collection) -> None:
        collection.delete(ids=ids)

    return delete


def _lister(offset: int, limit: int) -> Callable[[Collection], list[str]]:
    def page(collection: Collection) -> list[str]:
        return list(collection.get(include=[], limit=limit, offset=offset)["ids"])

    return page


def _vector(vector: Vector | None) -> Vector:
    assert vector is not None  # only embedded memories reach the index
    return np.asarray(vector, dtype=np.float32)
