"""Per-user derived indexes kept per store and rebuilt when the user's revision changes."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engrain.model import Memory
from engrain.recall.per_revision import Embed, StoreIndexes


@dataclass(frozen=True)
class _Index:
    revision: int
    count: int
    previous: _Index | None


class _Store:
    def __init__(self) -> None:
        self.revisions = {"u": 1, "v": 1}
        self.memories: list[Memory] = []

    def revision(self, user_id: str) -> int:
        return self.revisions[user_id]

    def query(self, user_id: str) -> list[Memory]:
        return list(self.memories)


def _embed(texts: Sequence[str]) -> Any:
    return np.zeros((len(texts), 4), dtype=np.float32)


def test_an_index_is_kept_until_the_revision_changes_and_rebuilt_from_the_previous() -> None:
    built: list[tuple[str, int]] = []

    def build(memories: Sequence[Memory], user_id: str, revision: int, embed: Embed,
              previous: _Index | None) -> _Index:  # fmt: skip
        built.append((user_id, revision))
        return _Index(revision, len(memories), previous)

    indexes = StoreIndexes(build)
    store: Any = _Store()
    first = indexes(store).of(store, "u", _embed)
    assert indexes(store).of(store, "u", _embed) is first  # same revision: kept
    store.revisions["u"] = 2
    second = indexes(store).of(store, "u", _embed)
    assert second.revision == 2 and second.previous is first  # rebuilt, reusing the old one
    indexes(store).of(store, "v", _embed)
    assert built == [("u", 1), ("u", 2), ("v", 1)]  # per user


def test_an_older_build_does_not_replace_a_newer_index() -> None:
    store: Any = _Store()
    late: list[_Index] = []

    def build(memories: Sequence[Memory], user_id: str, revision: int, embed: Embed,
              previous: _Index | None) -> _Index:  # fmt: skip
        if revision == 1 and not late:  # a slow reader: a newer index lands meanwhile
            store.revisions["u"] = 2
            late.append(indexes(store).of(store, "u", _embed))
        return _Index(revision, 0, previous)

    indexes = StoreIndexes(build)
    old = indexes(store).of(store, "u", _embed)
    assert old.revision == 1  # the caller gets what it built
    assert indexes(store).of(store, "u", _embed) is late[0]  # but revision 2 stays kept


def test_indexes_go_with_their_store() -> None:
    indexes: StoreIndexes[_Index] = StoreIndexes(lambda m, u, r, e, p: _Index(r, 0, p))
    store: Any = _Store()
    indexes(store).of(store, "u", _embed)
    assert len(indexes._stores) == 1
    del store
    gc.collect()
    assert len(indexes._stores) == 0


def test_the_indexes_of_the_most_recently_used_users_are_kept_and_no_more() -> None:
    """A long-lived process serving many users keeps :data:`HELD_USERS` indexes (session
    23 h2, ``bench/attacks/many_users.py``: one per user ever served before)."""
    from engrain.recall.per_revision import HELD_USERS

    built: list[str] = []

    def build(memories: Sequence[Memory], user_id: str, revision: int, embed: Embed,
              previous: _Index | None) -> _Index:  # fmt: skip
        built.append(user_id)
        return _Index(revision, len(memories), previous)

    store: Any = _Store()
    users = [f"user{n}" for n in range(HELD_USERS + 10)]
    store.revisions = dict.fromkeys(users, 1)
    indexes = StoreIndexes(build)(store)
    for user in users:
        indexes.of(store, user, _embed)
    indexes.of(store, users[10], _embed)  # used again: now the most recent
    assert len(indexes._users) == HELD_USERS
    assert users[10] in indexes._users and users[0] not in indexes._users
    built.clear()
    indexes.of(store, users[10], _embed)
    indexes.of(store, users[0], _embed)  # dropped: built again
    assert built == [users[0]]
