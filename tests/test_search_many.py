"""One product answers several searches (the gate's pool and its learnings) exactly as
separate searches would, and kind/type filters read integer codes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engrain.model import Kind, Memory, MemoryType
from engrain.store import MemoryFilter, MemoryStore
from engrain.store.sqlite import SQLiteStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
KINDS = list(Kind)


def _memories(n: int) -> list[Memory]:
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        vector = rng.normal(size=16).astype(np.float32)
        kind = KINDS[i % len(KINDS)]
        out.append(Memory.new("ada", f"memory {i}", kind.default_memory_type, kind, now=NOW,
                              embedding=vector / np.linalg.norm(vector)))  # fmt: skip
    return out


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_search_many_equals_separate_searches(backend: str, tmp_path: Path) -> None:
    store = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "s.db")
    store.write(_memories(300))
    query = np.ones(16, dtype=np.float32) / 4.0
    searches = [
        (20, MemoryFilter()),
        (15, MemoryFilter(kinds=(Kind.INVARIANT, Kind.PATTERN, Kind.PREFERENCE))),
        (10, MemoryFilter(memory_types=(MemoryType.EPISODIC,))),
        (5, MemoryFilter(kinds=())),
        (0, MemoryFilter()),
    ]
    many = store.search_many("ada", query, searches)
    assert many == [store.search("ada", query, k, flt) for k, flt in searches]
    assert {m.kind for m, _ in many[1]} <= {Kind.INVARIANT, Kind.PATTERN, Kind.PREFERENCE}
    assert len(many[1]) == 15 and many[3] == [] and many[4] == []
    assert all(m.memory_type is MemoryType.EPISODIC for m, _ in many[2])
    assert store.search_many("nobody", query, searches) == [[], [], [], [], []]


def test_kind_filter_after_a_kind_change_reads_the_new_code() -> None:
    store = MemoryStore()
    memories = _memories(30)
    store.write(memories)
    first = memories[0]
    before = store.query("ada", MemoryFilter(kinds=(Kind.ANTIPATTERN,)))
    store.write([first.evolve(kind=Kind.ANTIPATTERN)])
    after = store.query("ada", MemoryFilter(kinds=(Kind.ANTIPATTERN,)))
    assert first.id in {m.id for m in after} and first.id not in {m.id for m in before}


# -- the BM25 index grows with new memories instead of being rebuilt -------------------------


@given(
    st.lists(st.text(alphabet="abc de", min_size=0, max_size=30), min_size=0, max_size=12),
    st.lists(st.text(alphabet="abc de", min_size=0, max_size=30), min_size=1, max_size=6),
    st.text(alphabet="abc de", min_size=1, max_size=12),
)
def test_an_extended_index_scores_like_a_rebuilt_one(
    first: list[str], more: list[str], query: str
) -> None:
    from engrain.store.lexical import LexicalIndex

    base = LexicalIndex(first)
    grown = base.extended(more)
    np.testing.assert_allclose(grown.scores(query), LexicalIndex(first + more).scores(query),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(base.scores(query), LexicalIndex(first).scores(query))


def test_a_new_memory_extends_the_users_bm25_index() -> None:
    from engrain.store.cache import UserCache

    vector = np.ones(4, dtype=np.float32) / 2.0
    old = [Memory.new("ada", f"note {i} about the {w} pipeline", MemoryType.SEMANTIC,
                      Kind.FACT, now=NOW, embedding=vector)
           for i, w in enumerate(["billing", "forecast", "deploy"])]  # fmt: skip
    cache = UserCache(old)
    assert [m.id for m, _ in cache.lexical_search("billing", 5)] == [old[0].id]
    before = cache.snapshot.lexical
    assert before is not None
    new = Memory.new(
        "ada",
        "the billing retry pipeline",
        MemoryType.SEMANTIC,
        Kind.FACT,
        now=NOW,
        embedding=vector,
    )
    cache.upsert([new])
    after = cache.snapshot.lexical
    assert after is not None and after is not before  # extended, not dropped
    found = {m.id for m, _ in cache.lexical_search("billing retry", 5)}
    assert found == {old[0].id, new.id}
    edited = old[1].evolve(content="the billing forecast")
    cache.upsert([edited])
    assert cache.snapshot.lexical is not None  # an edited text is replaced in place
    assert old[1].id in {m.id for m, _ in cache.lexical_search("billing", 5)}
    assert old[1].id in {m.id for m, _ in cache.lexical_search("forecast", 5)}
    cache.upsert([edited.evolve(content="the deploy train")])
    assert old[1].id not in {m.id for m, _ in cache.lexical_search("billing forecast", 5)}


@given(
    st.lists(st.text(alphabet="abc de", min_size=0, max_size=30), min_size=1, max_size=10),
    st.dictionaries(st.integers(0, 9), st.text(alphabet="abc de", max_size=30), max_size=4),
    st.text(alphabet="abc de", min_size=1, max_size=12),
)
def test_a_replaced_text_scores_like_a_rebuilt_index(
    docs: list[str], edits: dict[int, str], query: str
) -> None:
    from engrain.store.lexical import LexicalIndex

    edits = {row: text for row, text in edits.items() if row < len(docs)}
    changed = [edits.get(row, text) for row, text in enumerate(docs)]
    replaced = LexicalIndex(docs).replaced({r: (docs[r], t) for r, t in edits.items()})
    np.testing.assert_allclose(replaced.scores(query), LexicalIndex(changed).scores(query),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
