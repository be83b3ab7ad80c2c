"""``Engine._gate`` reads the user's co-occurrence pairs with the gate's other reads, not
one round trip before them (``docs/postgres.md``, "Session 12"): on a store that overlaps
its reads the pairs are read while the gate searches, and a trivial message, which scores
nothing, does not wait for them (on a serial store it does not read them at all)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engrain import Engine
from engrain import feedback as fb
from engrain.embed.hashing import HashEmbedder
from engrain.model import Vector
from engrain.store import MemoryFilter, State
from engrain.store.memory import MemoryStore

from .conftest import NOW, make_settings

#: Seconds a read waits for the other one before giving up (only reached if they never
#: overlap, i.e. when the test fails).
_PATIENCE = 10.0


class _Watched(MemoryStore):
    """The in-memory store, reading concurrently, whose co-occurrence read waits for the
    gate's vector search to start (and says whether it did)."""

    def __init__(self, *, concurrent: bool) -> None:
        super().__init__()
        self.concurrent_reads = concurrent
        self.searching = threading.Event()
        self.overlapped: list[bool] = []
        self.pair_reads = 0

    def search_many(
        self, user_id: str, vector: Vector, searches: Sequence[tuple[int, MemoryFilter]]
    ) -> list[list[Any]]:
        self.searching.set()
        return super().search_many(user_id, vector, searches)

    def get_state(self, user_id: str, namespace: str, key: str) -> dict[str, Any] | None:
        if namespace == fb.COOCCURRENCE:
            self.pair_reads += 1
            if self.concurrent_reads:
                self.overlapped.append(self.searching.wait(_PATIENCE))
        return super().get_state(user_id, namespace, key)


def _engine(store: MemoryStore, tmp_path: Path) -> Engine:
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    engine.remember("Deploys go through the release workflow on main.", "u", kind="decision")
    engine.remember("The release workflow needs the vault token.", "u", kind="fact")
    return engine


def test_the_pairs_are_read_while_the_gate_searches(tmp_path: Path) -> None:
    store = _Watched(concurrent=True)
    with _engine(store, tmp_path) as engine:
        context = engine.context("How do deploys work?", "u", token_budget=500, now=NOW)
    assert context.memories
    assert store.overlapped == [True]


def test_the_pairs_still_score_a_context(tmp_path: Path) -> None:
    store = _Watched(concurrent=True)
    with _engine(store, tmp_path) as engine:
        first = engine.context("How do deploys work?", "u", token_budget=500, now=NOW)
        ids = [m.id for m in first.memories]
        assert len(ids) == 2
        pairs = {fb.PAIRS: {ids[0]: {ids[1]: 5}, ids[1]: {ids[0]: 5}}}
        store.write(state=[State("u", fb.COOCCURRENCE, fb.PAIRS, pairs)])
        store.searching.clear()
        gated = engine.explain("How do deploys work?", "u", token_budget=500, now=NOW)
    assert all(gated.components[i]["cooccurrence"] > 0 for i in ids)


def test_a_trivial_message_does_not_read_the_pairs_on_a_serial_store(tmp_path: Path) -> None:
    store = _Watched(concurrent=False)
    with _engine(store, tmp_path) as engine:
        assert engine.context("thanks!", "u", now=NOW).memories == []
        assert store.pair_reads == 0
        engine.context("How do deploys work?", "u", token_budget=500, now=NOW)
        assert store.pair_reads == 1
