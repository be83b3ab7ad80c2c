"""The gate's reads that need no query vector start before the intent model's embedding
(issue 12): on a store that serves reads from several threads the lexical matches and the
pinned memories are already running while the query is embedded, and the context is the same
as on a store that reads one at a time."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.embed.minilm import MODEL_ID
from engrain.model import Memory, Vector
from engrain.recall import gate as gate_module
from engrain.recall import understand
from engrain.recall.budget import assign_budget
from engrain.recall.classify import Classification, Complexity, classify
from engrain.recall.gate import GateOptions, gate
from engrain.store import MemoryStore
from engrain.store.base import ALL, MemoryFilter

from .conftest import NOW, make_settings

MESSAGE = "where is the deploy script for staging, and how should I debug it?"


class SpyStore(MemoryStore):
    """A memory store that records its vector-free reads; ``concurrent_reads`` says whether
    the gate may start them in reader threads."""

    def __init__(self) -> None:
        super().__init__()
        self.concurrent_reads = False
        self.lexical_sizes: list[int] = []
        self.pinned_reads = 0
        self.lexical_begun = threading.Event()
        self.pinned_begun = threading.Event()

    def lexical_search(
        self, user_id: str, text: str, k: int, flt: MemoryFilter = ALL
    ) -> list[tuple[Memory, float]]:
        self.lexical_sizes.append(k)
        self.lexical_begun.set()
        return super().lexical_search(user_id, text, k, flt)

    def query(
        self, user_id: str, flt: MemoryFilter = ALL, *, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        if flt.pinned:
            self.pinned_reads += 1
            self.pinned_begun.set()
        return super().query(user_id, flt, limit=limit, offset=offset)


class ModelEmbedder:
    """The hashing embedder under the intent model's embedder id (so the gate asks the model
    for a second opinion); embedding a query waits until the store's reads have begun when
    ``wait_for`` is set, and records whether they had."""

    model_id = MODEL_ID

    def __init__(self, store: SpyStore, wait_for: bool) -> None:
        self._inner = HashEmbedder()
        self._store = store
        self._wait = wait_for
        self.reads_begun_first: list[bool] = []

    def embed_query(self, text: str) -> Vector:
        if self._wait:
            begun = self._store.lexical_begun.wait(10) and self._store.pinned_begun.wait(10)
            self.reads_begun_first.append(begun)
        return np.asarray(self._inner.embed([text])[0])


def remember_notes(engine: Engine) -> None:
    """User ``u``'s 30 notes about deploy scripts, a procedure and a pinned fact: every read
    of a ``context()`` (vector, lexical, procedural, pinned) has rows to find."""
    for i in range(30):
        engine.remember(f"note {i}: the deploy script lives in tools/deploy{i}.sh", "u", now=NOW)
    engine.remember("Always run the deploy script for staging with the linter first", "u",
                    memory_type="procedural", now=NOW)  # fmt: skip
    pinned = engine.remember("The staging database is called atlas", "u", now=NOW)
    assert pinned.memory_id is not None
    engine.pin(pinned.memory_id, "u")


def _filled(tmp_path: Path) -> SpyStore:
    store = SpyStore()
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    remember_notes(engine)
    return store


def _run(store: SpyStore, embedder: ModelEmbedder) -> gate_module.Gated:
    return gate(store, embedder.embed_query, MESSAGE, "u", options=GateOptions(), now=NOW)


def _rules_kept(rules: Classification, *args: Any) -> Classification:
    """The model's second opinion agreeing with the rules (hashing vectors are no MiniLM
    vectors: what the model would read from them is beside the point here)."""
    return rules


def test_on_a_concurrent_store_the_reads_begin_before_the_query_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(understand, "refine", _rules_kept)
    store = _filled(tmp_path)
    store.concurrent_reads = True
    parallel_embedder = ModelEmbedder(store, wait_for=True)
    parallel = _run(store, parallel_embedder)
    assert parallel_embedder.reads_begun_first == [True]
    assert len(store.lexical_sizes) == 1 and store.pinned_reads == 1

    store.concurrent_reads = False
    serial = _run(store, ModelEmbedder(store, wait_for=False))
    assert [s.memory.id for s in parallel.selected] == [s.memory.id for s in serial.selected]
    assert parallel.text == serial.text and "atlas" in parallel.text


def test_on_a_serial_store_nothing_is_read_before_the_query_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(understand, "refine", _rules_kept)
    store = _filled(tmp_path)
    seen: list[tuple[int, int]] = []
    embedder = ModelEmbedder(store, wait_for=False)
    inner = embedder.embed_query

    def embed_query(text: str) -> Vector:
        seen.append((len(store.lexical_sizes), store.pinned_reads))
        return inner(text)

    embedder.embed_query = embed_query  # type: ignore[method-assign]
    gate(store, embedder.embed_query, MESSAGE, "u", options=GateOptions(), now=NOW)
    assert seen == [(0, 0)]
    assert len(store.lexical_sizes) == 1 and store.pinned_reads == 1


@pytest.mark.parametrize("concurrent", [True, False])
def test_a_model_that_changes_the_pools_size_searches_again_with_that_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrent: bool
) -> None:
    store = _filled(tmp_path)
    store.concurrent_reads = concurrent

    def deeper(rules: Classification, *args: Any) -> Classification:
        return replace(rules, complexity=Complexity.DEEP)  # a budget of 8,000: a pool of 200

    monkeypatch.setattr(understand, "refine", deeper)
    gated = _run(store, ModelEmbedder(store, wait_for=False))
    assert gated.classification.complexity is Complexity.DEEP
    expected: Sequence[int] = [gated.budget.tokens // 40]
    if concurrent:  # begun with the rules' budget, then again with the model's
        rules = assign_budget(classify(MESSAGE)).tokens // 40
        assert rules != expected[0]
        expected = [max(GateOptions().pool, rules), *expected]
    assert store.lexical_sizes == expected
    assert store.pinned_reads == 1
    assert "atlas" in gated.text
