"""The PostgreSQL store's small tables: the embedding cache, the users' revisions, state
documents and API keys. Each read is one statement; each write one transaction
(``pooled.py``) whose statements are pipelined with its ``BEGIN`` and ``COMMIT``, so it
counts what it changed with ``RETURNING`` (a pipeline has no row count before its sync)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from engrain.model import Vector, as_utc
from engrain.store.base import KeyRecord, State
from engrain.store.postgres.codec import KEY_COLUMNS, Conn, key_from_row, key_row
from engrain.store.postgres.pooled import Pooled
from engrain.store.postgres.sql import chunks


class Records(Pooled):
    """The embedding cache, revisions, state documents and API keys."""

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Vector]:
        """Embedding cache lookup: content hash → vector, for the hashes known."""
        found: dict[str, Vector] = {}
        for part in chunks(list(hashes)):
            for h, vector in self._read(
                "SELECT content_hash, vector FROM embedding_cache "
                "WHERE model_id = %s AND content_hash = ANY(%s::text[])",
                (model_id, part),
            ):
                found[h] = vector
        return found

    def cache_embeddings(self, model_id: str, vectors: dict[str, Vector]) -> None:
        """Embedding cache write (an existing entry is kept)."""
        if not vectors:
            return
        rows = [(model_id, h, np.asarray(v, dtype=np.float32)) for h, v in sorted(vectors.items())]

        def body(db: Conn) -> None:
            with db.cursor(binary=True) as cur:
                cur.executemany(
                    "INSERT INTO embedding_cache (model_id, content_hash, vector) "
                    "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    rows,
                )

        self._transaction(body)

    def revision(self, user_id: str) -> int:
        """The user's revision: changes with every write of their memories; 0 if never."""
        rows = self._read("SELECT revision FROM revisions WHERE user_id = %s", (user_id,))
        return int(rows[0][0]) if rows else 0

    def get_state(self, user_id: str, namespace: str, key: str) -> dict[str, Any] | None:
        """The state document at ``(namespace, key)``, or ``None``."""
        rows = self._read(
            "SELECT value FROM state WHERE user_id = %s AND namespace = %s AND key = %s",
            (user_id, namespace, key),
        )
        return dict(rows[0][0]) if rows else None

    def states(self, user_id: str, namespace: str | None = None) -> list[State]:
        """Every state document of the user (in ``namespace``, or in all), sorted by
        namespace and key."""
        rows = self._read(
            "SELECT namespace, key, value FROM state WHERE user_id = %s "
            "AND (%s::text IS NULL OR namespace = %s) ORDER BY namespace, key",
            (user_id, namespace, namespace),
        )
        return [State(user_id, ns, k, dict(v)) for ns, k, v in rows]

    def expire_state(self, user_id: str, namespace: str, before: datetime) -> int:
        """Delete the user's documents in ``namespace`` written before ``before``; how many."""
        when = as_utc(before)

        def body(db: Conn) -> int:
            cursor = db.execute(
                "DELETE FROM state WHERE user_id = %s AND namespace = %s AND updated_at < %s "
                "RETURNING 1",
                (user_id, namespace, when),
            )
            return len(cursor.fetchall())  # (a pipeline has no row count before its sync)

        return self._transaction(body)

    def users(self) -> list[str]:
        """Every user id with at least one memory, sorted."""
        return [
            r[0]
            for r in self._read(
                "SELECT user_id FROM revisions WHERE documents > 0 ORDER BY user_id"
            )
        ]

    def put_key(self, record: KeyRecord) -> bool:
        """Store a new API key; ``False`` (nothing written) if its id is taken."""

        def body(db: Conn) -> bool:
            cursor = db.execute(
                f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING RETURNING 1",
                key_row(record),
            )
            return len(cursor.fetchall()) == 1

        return self._transaction(body)

    def key_record(self, digest: str) -> KeyRecord | None:
        """The key whose secret hashes to ``digest`` (asked of the database on every call),
        or ``None``."""
        rows = self._read(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE digest = %s", (digest,))
        return key_from_row(rows[0]) if rows else None

    def key_records(self) -> list[KeyRecord]:
        """Every key, oldest first (ties by id)."""
        rows = self._read(f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
        return [key_from_row(r) for r in rows]

    def revoke_key(self, key_id: str, at: datetime) -> bool:
        """Mark the key revoked (the first revocation time is kept); ``False`` if unknown."""
        when = as_utc(at)

        def body(db: Conn) -> bool:
            cursor = db.execute(
                "UPDATE api_keys SET revoked_at = coalesce(revoked_at, %s) WHERE id = %s "
                "RETURNING 1",
                (when, key_id),
            )
            return len(cursor.fetchall()) == 1

        return self._transaction(body)
