"""The engine's side of key claims: what a plan assumed about a procedural key goes with
its write, a refused write is planned again, and a call without a key claims nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.engine import KEY_ATTEMPTS
from engrain.errors import KeyChangedError
from engrain.store import KeyClaim, MemoryStore

from .conftest import NOW, make_settings

USER = "ada"


class Recording(MemoryStore):
    """A memory store keeping the claims of every write; ``refuse`` writes with claims
    raise :class:`KeyChangedError` (as if another engine kept changing the key)."""

    def __init__(self, refuse: int = 0) -> None:
        super().__init__()
        self.claims: list[list[KeyClaim]] = []
        self.refuse = refuse

    def write(self, *args: Any, claims: Sequence[KeyClaim] = (), **kwargs: Any) -> None:
        self.claims.append(list(claims))
        if claims and self.refuse:
            self.refuse -= 1
            raise KeyChangedError("changed")
        super().write(*args, claims=claims, **kwargs)


def engine(tmp_path: Path, store: MemoryStore) -> Engine:
    return Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())


def test_a_call_without_a_key_claims_nothing(tmp_path: Path) -> None:
    store = Recording()
    eng = engine(tmp_path, store)
    eng.remember("The staging database is on port 5433.", USER, now=NOW)
    eng.ingest("We met in Lisbon to plan the launch of the new pricing page.", USER, now=NOW)
    assert store.claims and all(c == [] for c in store.claims)


def test_a_keyed_remember_claims_what_it_found(tmp_path: Path) -> None:
    store = Recording()
    eng = engine(tmp_path, store)
    first = eng.remember("deploy with make deploy", USER, "golden_path", key="deploy", now=NOW)
    second = eng.remember("deploy with make ship", USER, "golden_path", key="deploy", now=NOW)
    assert (first.action, second.action) == ("stored", "merged")
    assert [(c.user_id, c.filter.key, c.found) for claims in store.claims for c in claims] == [
        (USER, "deploy", None),
        (USER, "deploy", first.memory_id),
    ]


def test_a_refused_write_is_planned_again(tmp_path: Path) -> None:
    store = Recording(refuse=KEY_ATTEMPTS - 1)
    eng = engine(tmp_path, store)
    outcome = eng.remember("deploy with make deploy", USER, "golden_path", key="deploy", now=NOW)
    assert len(store.claims) == KEY_ATTEMPTS
    assert [m.id for m in eng.list(USER)] == [outcome.memory_id]


def test_a_key_that_keeps_changing_raises_and_writes_nothing(tmp_path: Path) -> None:
    store = Recording(refuse=KEY_ATTEMPTS)
    eng = engine(tmp_path, store)
    with pytest.raises(KeyChangedError):
        eng.remember("deploy with make deploy", USER, "golden_path", key="deploy", now=NOW)
    assert len(store.claims) == KEY_ATTEMPTS
    assert eng.list(USER) == []
