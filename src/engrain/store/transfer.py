"""Copy memories from one store to another: how a SQLite store moves into PostgreSQL.

    from engrain.store import open_store
    from engrain.store.transfer import copy_store

    source = open_store("sqlite:////home/me/.local/share/engrain/engrain.db")
    target = open_store("postgresql://engrain@db.internal/engrain")
    print(copy_store(source, target, verify=True))

The copy goes through the :class:`~engrain.store.base.Store` protocol, so any backend can be
either side. It is lossless: every field of every memory, embeddings included, arrives as
it was (ids too, so it can be re-run: a second run replaces the same rows). Each batch is one
transaction of the target; a failure leaves the batches already written in place and raises,
and running the copy again finishes the job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from engrain.errors import StoreError, ValidationError
from engrain.ingest.chunk import turn_lines
from engrain.model import Memory, Vector, content_hash
from engrain.store.base import Store


def copy_store(
    source: Store,
    target: Store,
    *,
    users: Sequence[str] | None = None,
    batch: int = 500,
    cache_models: Sequence[str] = (),
    state: bool = True,
    verify: bool = False,
    on_batch: Callable[[str, int], None] | None = None,
) -> dict[str, int]:
    """Copy every memory of ``users`` (default: every user of ``source``) into ``target``.

    * ``batch`` — memories per write transaction on the target.
    * ``cache_models`` — embedding-cache entries of these model ids whose content hash is
      one of a copied memory's, or one of a copied conversation chunk's lines' (their
      vectors score a chunk by its best turn, :mod:`engrain.recall.turns`), are copied too
      (the cache only saves re-embedding; leave it empty to skip it).
    * ``state`` — also copy each user's state documents (compiled tiers, learned
      co-occurrence, recent contexts), read with :meth:`Store.states`.
    * ``verify`` — read every batch back from ``target`` and compare it field by field
      (embeddings included); :class:`~engrain.errors.StoreError` on any difference.
    * ``on_batch(user_id, copied_so_far)`` — called after each batch (progress bars).

    Memories are written oldest first, so the target keeps the source's insertion order.
    A copy of every user (``users`` not given) moves the store, so its API keys come too
    (hashes, scopes, revocations; :func:`copy_keys`): the server's callers keep working.
    Returns counts: ``users``, ``memories``, ``embeddings`` (memories that had a vector),
    ``state``, ``cached_embeddings`` and ``keys``.
    """
    if batch < 1:
        raise ValidationError(f"batch must be at least 1, not {batch}")
    counts = {"users": 0, "memories": 0, "embeddings": 0, "state": 0, "cached_embeddings": 0,
              "keys": 0}  # fmt: skip
    wanted = list(users) if users is not None else source.users()
    hashes: set[str] = set()
    for user_id in wanted:
        memories = list(reversed(source.query(user_id)))
        for start in range(0, len(memories), batch):
            part = memories[start : start + batch]
            target.write(part)
            if verify:
                _verify(part, target.get(user_id, [m.id for m in part]))
            counts["memories"] += len(part)
            counts["embeddings"] += sum(m.embedding is not None for m in part)
            if on_batch is not None:
                on_batch(user_id, start + len(part))
        if state:
            mine = source.states(user_id)
            for start in range(0, len(mine), batch):
                target.write(state=mine[start : start + batch])
            counts["state"] += len(mine)
        hashes.update(m.content_hash for m in memories if m.content_hash)
        hashes.update(line_hashes(memories))
        counts["users"] += 1
    ordered = sorted(hashes)
    for model_id in cache_models:
        for start in range(0, len(ordered), batch):
            found = source.cached_embeddings(model_id, ordered[start : start + batch])
            target.cache_embeddings(model_id, found)
            counts["cached_embeddings"] += len(found)
    if users is None:
        counts["keys"] = copy_keys(source, target)
    return counts


def copy_keys(source: Store, target: Store) -> int:
    """Every API key of ``source`` into ``target``, as stored (the digest, never a secret):
    a key the target lacks is added, one it has keeps its record but is revoked when the
    source's is (a re-run after a revocation carries it over). Returns how many keys the
    source holds."""
    records = source.key_records()
    for record in records:
        if not target.put_key(record) and record.revoked_at is not None:
            target.revoke_key(record.id, record.revoked_at)
    return len(records)


def line_hashes(memories: Sequence[Memory]) -> set[str]:
    """The content hashes of the lines of ``memories``' conversation chunks (memories with
    turn ids): the embedding-cache keys of their turns' vectors."""
    return {
        content_hash(line)
        for m in memories
        if m.provenance.turn_ids
        for line in turn_lines(m.content)
    }


def _verify(written: Sequence[Memory], read_back: Sequence[Memory]) -> None:
    """Every field equal (times as instants: a store may return them in UTC) and the same
    embedding bit for bit."""
    back = {m.id: m for m in read_back}
    for memory in written:
        got = back.get(memory.id)
        if got is None or got != memory or not _same_vector(got.embedding, memory.embedding):
            raise StoreError(
                f"copy of memory {memory.id} of user {memory.user_id} does not read back equal"
            )


def _same_vector(a: Vector | None, b: Vector | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(np.array_equal(a, b))
