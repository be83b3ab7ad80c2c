"""A store whose vectors live in Chroma: ``chroma://path`` (embedded) or
``chroma+http://host:port?state=/path/state.db`` (a Chroma server).

Chroma has no transactions, so it cannot be the source of truth of a store whose writes are
all-or-nothing. The rows, state documents, revisions, API keys and the embedding cache live
in a SQLite *sidecar* (:class:`~engrain.store.sqlite.SQLiteStore`: one transaction per
write); Chroma holds every embedded memory's text, vector and filter fields, and answers
:meth:`ChromaStore.search`. The :class:`~engrain.store.chroma.ledger.Ledger` records which
users' Chroma records match the sidecar; a user who does not match (a write that died
between the two, a sidecar used with a new collection) is repaired from the sidecar before
the next search. What is guaranteed is in ``docs/chroma.md``.

Needs ``pip install 'engrain[chroma]'``; ``import engrain`` never imports chromadb.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from engrain.errors import StoreError
from engrain.model import Memory, Vector
from engrain.store.base import ALL, KeyClaim, KeyRecord, MemoryFilter, Patch, State
from engrain.store.chroma.index import ChromaIndex, connect
from engrain.store.chroma.ledger import DIRTY, Ledger
from engrain.store.chroma.url import ChromaTarget, parse_url
from engrain.store.sqlite import SQLiteStore

__all__ = ["ChromaStore", "open_chroma"]

log = logging.getLogger(__name__)

#: Times a search repairs a user and asks Chroma again before giving up.
SEARCH_ATTEMPTS = 3
#: A search first asks Chroma for ``k × OVERFETCH + OVERFETCH_PAD`` unfiltered neighbours.
OVERFETCH = 2
OVERFETCH_PAD = 10
#: The widest unfiltered ask before Chroma is asked to filter instead.
WIDEST = 2000
#: A filter at most this many of the user's memories pass is searched exactly in the
#: sidecar (as the PostgreSQL store searches small users exactly, not through HNSW).
EXACT_MAX = 2000
EXACT_SHARE = 0.25


def open_chroma(url: str) -> ChromaStore:
    """The store a ``chroma://`` or ``chroma+http(s)://`` URL names (see :mod:`.url`)."""
    return ChromaStore(parse_url(url))


class ChromaStore:
    """Rows in a SQLite sidecar (one transaction per write), vectors in a Chroma collection
    kept in step with it. Reads other than :meth:`search` are the sidecar's."""

    def __init__(self, target: ChromaTarget) -> None:
        self.target = target
        if target.path is not None:
            try:
                target.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create {target.path}: {exc}") from exc
        self._sidecar = SQLiteStore(target.sidecar)
        try:
            self._ledger = Ledger(target.sidecar, target.collection)
            self._index = ChromaIndex(target, connect(target))
        except BaseException:
            self._sidecar.close()
            raise
        # one thread at a time touches Chroma or the ledger; other processes are ordered
        # by the ledger's file lock
        self._lock = threading.RLock()

    # -- writes ---------------------------------------------------------------------------

    def write(
        self,
        upserts: Sequence[Memory] = (),
        deletes: Sequence[Memory] = (),
        state: Sequence[State] = (),
        patches: Sequence[Patch] = (),
        claims: Sequence[KeyClaim] = (),
    ) -> None:
        """The sidecar's one transaction (see :meth:`Store.write`), then the same memories
        put in or taken out of Chroma. Their users are marked dirty first and clean after,
        so if Chroma fails the write still stands (it is committed) and the next search of
        those users repairs Chroma from the sidecar first."""
        touched: dict[str, set[str]] = {}
        for memory in [*upserts, *deletes]:
            touched.setdefault(memory.user_id, set()).add(memory.id)
        for patch in patches:
            touched.setdefault(patch.user_id, set()).add(patch.memory_id)
        if not touched:
            self._sidecar.write(upserts, deletes, state, patches, claims)
            return
        with self._lock, self._ledger.exclusive():
            clean = {u for u in touched if self._in_step(u)}
            self._ledger.mark((u, DIRTY) for u in touched)
            try:
                self._sidecar.write(upserts, deletes, state, patches, claims)
            except BaseException:
                # nothing was written and Chroma was not touched: the users are as before
                self._restore(clean)
                raise
            try:
                for user, memory_ids in touched.items():
                    if user in clean:
                        self._apply(user, memory_ids)
                    else:
                        self._rebuild(user)
                    self._ledger.mark([(user, self._sidecar.revision(user))])
            except StoreError as exc:
                # committed in the sidecar; Chroma catches up before the next search
                log.warning("%s; the next search repairs it from the sidecar", exc)

    def _in_step(self, user_id: str) -> bool:
        return self._ledger.synced(user_id) == self._sidecar.revision(user_id)

    def _restore(self, clean: set[str]) -> None:
        try:
            self._ledger.mark((u, self._sidecar.revision(u)) for u in clean)
        except StoreError as exc:  # they stay dirty: a search repairs them, slowly
            log.warning("%s", exc)

    def _apply(self, user_id: str, memory_ids: set[str]) -> None:
        """Make Chroma's records of these memories what the sidecar now holds."""
        present = self._sidecar.get(user_id, sorted(memory_ids))
        embedded = [m for m in present if m.embedding is not None]
        self._index.upsert(embedded)
        self._index.delete(user_id, sorted(memory_ids - {m.id for m in embedded}))

    def _rebuild(self, user_id: str) -> None:
        """Make Chroma's records of the user exactly the sidecar's embedded memories."""
        embedded = [m for m in self._sidecar.query(user_id) if m.embedding is not None]
        stale = self._index.memory_ids(user_id) - {m.id for m in embedded}
        self._index.delete(user_id, sorted(stale))
        self._index.upsert(embedded)

    def repair(self, user_id: str) -> None:
        """Rebuild the user's Chroma records from the sidecar and mark them in step."""
        with self._lock, self._ledger.exclusive():
            self._rebuild(user_id)
            self._ledger.mark([(user_id, self._sidecar.revision(user_id))])

    # -- search ---------------------------------------------------------------------------

    def search(
        self, user_id: str, vector: Vector, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """Chroma's ``k`` nearest among the user's memories passing ``flt``, read back from
        the sidecar and scored there (the same cosine as the other backends), best first.
        A user whose records are out of step, or a hit the sidecar does not confirm, is
        repaired from the sidecar and asked again."""
        return self.search_many(user_id, vector, [(k, flt)])[0]

    def search_many(
        self, user_id: str, vector: Vector, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> list[list[tuple[Memory, float]]]:
        """:meth:`search` for each ``(k, flt)``, from one unfiltered ask of Chroma (and a
        filtered one for each search it does not answer)."""
        if all(k <= 0 for k, _ in searches):
            return [[] for _ in searches]
        query = np.asarray(vector, dtype=np.float32)
        for _ in range(SEARCH_ATTEMPTS):
            with self._lock:
                with self._ledger.shared():
                    found = self._search_in_step(user_id, query, searches)
                if found is not None:
                    return found
                self.repair(user_id)
        raise StoreError(
            f"{self.target.describe()} stays out of step with {self.target.sidecar} "
            f"for user {user_id!r} after {SEARCH_ATTEMPTS} repairs"
        )

    def _search_in_step(
        self, user_id: str, query: Vector, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> list[list[tuple[Memory, float]]] | None:
        """The searches, or ``None`` if Chroma does not match the sidecar for this user.

        First the ``k × 2 + 10`` nearest (largest ``k``) with no filter, checked against the
        sidecar's rows: recall's filters (not muted, not superseded, important enough) pass
        almost every memory, and Chroma's unfiltered HNSW search is many times faster than
        its filtered one (which reads every record's metadata: 86 ms against 13 ms for the
        700 nearest of 10,000). A search with fewer than ``k`` passing among them, when
        Chroma holds more, goes on in :meth:`_narrow`."""
        if not self._in_step(user_id):
            return None
        wide = max(k for k, _ in searches) * OVERFETCH + OVERFETCH_PAD
        hits = self._index.nearest(user_id, query, wide)
        nearest = self._confirmed(user_id, hits, ALL)
        exhausted = len(hits) < wide  # every record Chroma holds for the user came back
        if nearest is None or (exhausted and len(hits) != self._embedded(user_id, query, wide)):
            # Chroma holds what the sidecar does not, or lost records (a collection deleted
            # and written again)
            return None
        out: list[list[tuple[Memory, float]]] = []
        for k, flt in searches:
            passing = [m for m in nearest if flt.matches(m)] if k > 0 else []
            if len(passing) < k and len(hits) == wide:  # Chroma may hold more that pass
                narrowed = self._narrow(user_id, query, k, flt, len(passing) / wide)
                if narrowed is None:
                    return None
                passing = narrowed
            scored = sorted(((m, _similarity(m, query)) for m in passing), key=_best_first)
            out.append(scored[:k])
        return out

    def _narrow(
        self, user_id: str, query: Vector, k: int, flt: MemoryFilter, rate: float
    ) -> list[Memory] | None:
        """The memories a selective ``flt`` search ranks (``None``: out of step), cheapest
        way first. When at most :data:`EXACT_MAX` memories or :data:`EXACT_SHARE` of the
        user's pass (recall's typed learnings, a pinned few), the sidecar's exact search
        over its working set: Chroma's filtered search reads every record's metadata
        (85-300 ms at 10,000 memories on a busy 2-core machine), and the few that pass may
        all lie beyond any unfiltered ask. Else, when the share that passed the first ask
        says an unfiltered ask of at most :data:`WIDEST` would hold ``k``, that ask; else
        Chroma filters."""
        passing = self._sidecar.count(user_id, flt)
        if passing <= max(EXACT_MAX, EXACT_SHARE * self._sidecar.count(user_id)):
            return [m for m, _ in self._sidecar.search(user_id, query, k, flt)]
        wider = math.ceil(k / max(rate, 1e-9) * OVERFETCH) + OVERFETCH_PAD
        if wider <= WIDEST:
            hits = self._index.nearest(user_id, query, wider)
            found = self._confirmed(user_id, hits, ALL)
            if found is None:
                return None
            kept = [m for m in found if flt.matches(m)]
            if len(kept) >= k or len(hits) < wider:
                return kept
        return self._confirmed(user_id, self._index.nearest(user_id, query, k, flt), flt)

    def _embedded(self, user_id: str, query: Vector, at_most: int) -> int:
        """How many of the user's memories have a vector, counting to ``at_most``."""
        return len(self._sidecar.search(user_id, query, at_most))

    def _confirmed(self, user_id: str, hits: list[str], flt: MemoryFilter) -> list[Memory] | None:
        """The sidecar's rows of Chroma's hits, or ``None`` if Chroma holds a record the
        sidecar does not (a stale collection) or one that should not pass ``flt``."""
        # the sidecar's working set, not a SELECT: hundreds of rows per search
        memories = self._sidecar.cached(user_id, hits)
        if len(memories) != len(hits) or not all(
            m.embedding is not None and flt.matches(m) for m in memories
        ):
            return None
        return memories

    # -- everything else is the sidecar's -----------------------------------------------

    def revision(self, user_id: str) -> int:
        """The sidecar's revision of the user's memories."""
        return self._sidecar.revision(user_id)

    def get_state(self, user_id: str, namespace: str, key: str) -> dict[str, Any] | None:
        """The state document at ``(namespace, key)``, from the sidecar."""
        return self._sidecar.get_state(user_id, namespace, key)

    def states(self, user_id: str, namespace: str | None = None) -> list[State]:
        """The user's state documents, from the sidecar."""
        return self._sidecar.states(user_id, namespace)

    def expire_state(self, user_id: str, namespace: str, before: datetime) -> int:
        """Delete state documents written before ``before``, in the sidecar."""
        return self._sidecar.expire_state(user_id, namespace, before)

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        """The user's memories with these ids, from the sidecar."""
        return self._sidecar.get(user_id, ids)

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """The user's memories passing ``flt``, newest first, from the sidecar."""
        return self._sidecar.query(user_id, flt, limit=limit, offset=offset)

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        """BM25 over the user's memories, in process from the sidecar's working set
        (Chroma has no BM25)."""
        return self._sidecar.lexical_search(user_id, text, k, flt)

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        """Count accesses in the sidecar (nothing Chroma filters on changes)."""
        self._sidecar.record_access(user_id, ids, at)

    def record_uses(
        self, user_id: str, ids: Sequence[str], at: datetime, state: Sequence[State] = ()
    ) -> None:
        """Count accesses and write ``state`` in one sidecar transaction (no memory and
        nothing Chroma holds changes, so the ledger is not involved)."""
        self._sidecar.record_uses(user_id, ids, at, state)

    def count(self, user_id: str, flt: MemoryFilter = ALL) -> int:
        """How many of the user's memories pass ``flt``, from the sidecar."""
        return self._sidecar.count(user_id, flt)

    def centroid(self, user_id: str) -> Vector | None:
        """The user's mean embedding, from the sidecar."""
        return self._sidecar.centroid(user_id)

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        """Embedding cache lookup, in the sidecar."""
        return self._sidecar.cached_embeddings(model_id, hashes)

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        """Embedding cache write, in the sidecar."""
        self._sidecar.cache_embeddings(model_id, vectors)

    def users(self) -> list[str]:
        """Every user with a memory, from the sidecar."""
        return self._sidecar.users()

    def put_key(self, record: KeyRecord) -> bool:
        """Store a new API key in the sidecar; ``False`` if its id is taken."""
        return self._sidecar.put_key(record)

    def key_record(self, digest: str) -> KeyRecord | None:
        """The key whose secret hashes to ``digest``, read from the sidecar."""
        return self._sidecar.key_record(digest)

    def key_records(self) -> list[KeyRecord]:
        """Every key, oldest first, from the sidecar."""
        return self._sidecar.key_records()

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Revoke a key in the sidecar; ``False`` if unknown."""
        return self._sidecar.revoke_key(key_id, at)

    def close(self) -> None:
        """Close the Chroma client, the ledger and the sidecar."""
        with self._lock:
            try:
                self._index.close()
            finally:
                self._ledger.close()
                self._sidecar.close()


def _best_first(pair: tuple[Memory, float]) -> float:
    return -pair[1]


def _similarity(memory: Memory, query: Vector) -> float:
    """Dot product, the cosine for unit vectors: what the SQLite store returns."""
    assert memory.embedding is not None
    return float(np.dot(memory.embedding, query))
