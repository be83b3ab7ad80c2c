"""An in-memory store: the reference implementation of the protocol, used by fast tests."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from engrain.model import Memory, Vector
from engrain.store.base import KeyClaim, KeyRecord, Patch, State, counted
from engrain.store.cache import UserCache
from engrain.store.cache_reads import WorkingSetReads


class MemoryStore(WorkingSetReads):
    """Keeps every user's memories in a :class:`UserCache`. A write reads every item it is
    given before changing anything, so a bad item leaves the store as it was.

    Writes (and :meth:`record_access`) hold the store's lock from reading a row to replacing
    it, so a patch and a delete are serialised and a forget wins; reads take no store lock
    beyond finding the user's cache, whose snapshots are immutable."""

    def __init__(self) -> None:
        self._users: dict[str, UserCache] = {}
        self._vectors: dict[tuple[str, str], Vector] = {}
        self._state: dict[tuple[str, str, str], tuple[str, datetime]] = {}
        self._revisions: Counter[str] = Counter()
        self._keys: dict[str, KeyRecord] = {}
        self._lock = threading.RLock()

    def write(
        self,
        upserts: Sequence[Memory] = (),
        deletes: Sequence[Memory] = (),
        state: Sequence[State] = (),
        patches: Sequence[Patch] = (),
        claims: Sequence[KeyClaim] = (),
    ) -> None:
        """The claims checked, then upserts, patches (of rows that exist), deletes and
        state, atomically (see :meth:`Store.write`)."""
        plan_upserts = [(m.user_id, m.id, counted(m)) for m in upserts]
        plan_deletes = [(m.user_id, m.id) for m in deletes]
        plan_state = [(s, None if s.change else s.encoded()) for s in state]
        now = datetime.now(UTC)
        with self._lock:
            for claim in claims:
                users = self._users.get(claim.user_id)
                if users is None:
                    rows: list[Memory] = []
                elif claim.by_id and claim.found is not None:
                    rows = [m for m in users.get([claim.found]) if claim.filter.matches(m)]
                else:
                    rows = users.query(claim.filter, None, 0)
                claim.check(m.id for m in rows)
            # every patched row and changed document is computed before anything changes:
            # a patch or document that does not fit raises here and the store stays as it was
            documents = [self._resolved(s) if s.change else ((s.user_id, s.namespace, s.key), v)
                         for s, v in plan_state]  # fmt: skip
            staged = {(m.user_id, m.id): m for _, _, m in plan_upserts}
            for patch in patches:
                current = staged.get(patch.where)
                if current is None and patch.user_id in self._users:
                    found = self._users[patch.user_id].get([patch.memory_id])
                    current = found[0] if found else None
                if current is not None:
                    staged[patch.where] = counted(patch.apply(current))
            changed = {u for u, _ in staged} | {u for u, _ in plan_deletes}
            for user in changed:
                self._revisions[user] += 1
            self._put_state(documents, now)
            by_user: dict[str, list[Memory]] = {}
            for (user, _), memory in staged.items():
                by_user.setdefault(user, []).append(memory)
            for user, memories in by_user.items():
                self._users.setdefault(user, UserCache()).upsert(memories)
            for user, memory_id in plan_deletes:
                if user in self._users:
                    self._users[user].delete([memory_id])
            for user in [u for u in changed if u in self._users and not len(self._users[u])]:
                del self._users[user]

    def _resolved(self, change: State) -> tuple[tuple[str, str, str], str | None]:
        """A ``change`` document resolved against the one held now, encoded; the lock is
        held."""
        where = (change.user_id, change.namespace, change.key)
        held = self._state.get(where)
        return where, change.resolved(json.loads(held[0]) if held else None).encoded()

    def _put_state(
        self, plan: Sequence[tuple[tuple[str, str, str], str | None]], now: datetime
    ) -> None:
        """Put (or, for ``None``, delete) encoded state documents; the lock is held."""
        for where, value in plan:
            if value is None:
                self._state.pop(where, None)
            else:
                self._state[where] = (value, now)

    def _cache(self, user_id: str) -> UserCache:
        with self._lock:
            return self._users.get(user_id) or UserCache()

    def get(self, user_id: str, ids: Sequence[str]) -> list[Memory]:
        return self._cache(user_id).get(ids)

    def record_access(self, user_id: str, ids: Sequence[str], at: datetime) -> None:
        with self._lock:
            self._cache(user_id).touch(ids, at)

    def record_uses(
        self, user_id: str, ids: Sequence[str], at: datetime, state: Sequence[State] = ()
    ) -> None:
        """:meth:`record_access` and the ``state`` documents under the store's lock, so no
        other call sees one without the other; every document is encoded (a bad one
        raises) before anything changes."""
        plan_state = [((s.user_id, s.namespace, s.key), s.encoded()) for s in state]
        now = datetime.now(UTC)
        with self._lock:
            self._put_state(plan_state, now)
            if ids:
                self._cache(user_id).touch(ids, at)

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        with self._lock:
            return {
                h: self._vectors[(model_id, h)] for h in hashes if (model_id, h) in self._vectors
            }

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        with self._lock:
            for h, v in vectors.items():
                self._vectors.setdefault((model_id, h), np.asarray(v, dtype=np.float32))

    def revision(self, user_id: str) -> int:
        with self._lock:
            return self._revisions[user_id]

    def get_state(self, user_id: str, namespace: str, key: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._state.get((user_id, namespace, key))
            return None if found is None else dict(json.loads(found[0]))

    def states(self, user_id: str, namespace: str | None = None) -> list[State]:
        """Every state document of the user (in ``namespace``, or in all), sorted by
        namespace and key."""
        with self._lock:
            found = [
                (where, value) for where, (value, _) in self._state.items()
                if where[0] == user_id and namespace in (None, where[1])
            ]  # fmt: skip
        return [State(*where, json.loads(value)) for where, value in sorted(found)]

    def expire_state(self, user_id: str, namespace: str, before: datetime) -> int:
        with self._lock:
            old = [
                where for where, (_, at) in self._state.items()
                if where[:2] == (user_id, namespace) and at < before
            ]  # fmt: skip
            for where in old:
                del self._state[where]
            return len(old)

    def users(self) -> list[str]:
        with self._lock:
            return sorted(self._users)

    def put_key(self, record: KeyRecord) -> bool:
        """Store a new API key; ``False`` if its id is taken."""
        with self._lock:
            if record.id in self._keys:
                return False
            self._keys[record.id] = record
            return True

    def key_record(self, digest: str) -> KeyRecord | None:
        """The key whose secret hashes to ``digest``, or ``None``."""
        with self._lock:
            return next((k for k in self._keys.values() if k.digest == digest), None)

    def key_records(self) -> list[KeyRecord]:
        """Every key, oldest first (ties by id)."""
        with self._lock:
            return sorted(self._keys.values(), key=lambda k: (k.created_at, k.id))

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Mark the key revoked (the first revocation time is kept); ``False`` if unknown."""
        with self._lock:
            found = self._keys.get(key_id)
            if found is None:
                return False
            if found.revoked_at is None:
                self._keys[key_id] = replace(found, revoked_at=at)
            return True

    def close(self) -> None:
        """Nothing to release."""
