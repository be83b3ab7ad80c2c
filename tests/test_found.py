"""A working set's search matches as their fields (``store/found.py``, issue 18): each field
of a :class:`~engrain.store.found.Found` is the one its built memory holds, the searches that
return memories build exactly what the fields give, and the gate builds the memories it
shows, not every candidate, with the same block as from built memories."""

from __future__ import annotations

import dataclasses
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.embed import HashEmbedder
from engrain.model import Kind, Memory, MemoryFields, Provenance
from engrain.recall.gate import Gated, GateOptions, gate
from engrain.store import columns, texts
from engrain.store.base import ALL, FoundSearch, Patch
from engrain.store.found import Found, built_all
from engrain.store.sqlite import SQLiteStore
from tests.test_columnar import NOW, USER, _image_saved
from tests.test_columnar import _memories as _varied

FIELDS = [f.name for f in dataclasses.fields(Memory)]
TOPICS = ["deploy", "billing", "tests", "search", "onboarding", "invoices", "latency", "docs"]
KINDS = [Kind.FACT, Kind.DECISION, Kind.PATTERN, Kind.EVENT, Kind.PREFERENCE, Kind.INVARIANT]


@pytest.fixture
def varied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Memories setting every field (tests/test_columnar.py), loaded from a saved image."""
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 1)
    path = tmp_path / "varied.db"
    with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
        store.write(_varied(14))
    _image_saved(path)
    return path


def _same_fields(fields: MemoryFields, memory: Memory) -> None:
    for name in FIELDS:
        got, want = getattr(fields, name), getattr(memory, name)
        if name == "embedding":
            assert got is not None and want is not None and np.array_equal(got, want), name
        else:
            assert got == want, name
            assert type(got) is type(want), name
    assert fields.when == memory.when


def test_each_field_of_a_row_found_is_its_memorys(varied: Path) -> None:
    with closing(SQLiteStore(varied, ann_min_vectors=None)) as store:
        want = {m.id: m for m in store.get(USER, [f"m{i}" for i in range(14)])}
    with closing(SQLiteStore(varied, ann_min_vectors=None)) as store:  # nothing built yet
        query = want["m1"].embedding
        assert query is not None
        (found,) = store.search_found(USER, query, [(14, ALL)])
        lexical = store.lexical_found(USER, "note café", 14)
        assert len(found) == len(lexical) == 14
        rows = [f for f, _ in [*found, *lexical]]
        assert all(isinstance(f, Found) for f in rows)  # none was built
        for fields in rows:
            _same_fields(fields, want[fields.id])
            built = fields.built()
            assert built == want[fields.id] and built is fields.built()


def test_searches_that_return_memories_build_what_the_fields_give(varied: Path) -> None:
    query = np.ones(8, dtype=np.float32) / np.sqrt(8)
    with closing(SQLiteStore(varied, ann_min_vectors=None)) as store:
        (memories,) = store.search_many(USER, query, [(10, ALL)])
        lexical = store.lexical_search(USER, "naïve note", 10)
    with closing(SQLiteStore(varied, ann_min_vectors=None)) as store:
        (found,) = store.search_found(USER, query, [(10, ALL)])
        found_lexical = store.lexical_found(USER, "naïve note", 10)
        for fields, built in [(found, memories), (found_lexical, lexical)]:
            assert [s for _, s in fields] == [s for _, s in built]
            assert built_all([f for f, _ in fields]) == [m for m, _ in built]


def test_a_memory_built_already_is_returned_as_itself(varied: Path) -> None:
    with closing(SQLiteStore(varied, ann_min_vectors=None)) as store:
        vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
        ((kept, _),) = store.search(USER, vector, 1)  # built, and kept
        (found,) = store.search_found(USER, vector, [(14, ALL)])
        by_id = {f.id: f for f, _ in found}
        assert by_id[kept.id] is kept
        assert sum(isinstance(f, Found) for f in by_id.values()) == 13


class _Built:
    """A store without :class:`~engrain.store.base.FoundSearch`: its searches build every
    match (what the gate read before)."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in ("search_found", "lexical_found"):
            raise AttributeError(name)
        return getattr(self._store, name)


def _notes(n: int) -> list[Memory]:
    embedder = HashEmbedder(dim=64)
    texts = [
        f"{TOPICS[i % len(TOPICS)]} note {i}: the {TOPICS[(i * 3) % len(TOPICS)]} service "
        f"runs on host {i % 17} and owner {['ana', 'bo', 'cy'][i % 3]} reviews it"
        for i in range(n)
    ]
    vectors = embedder.embed(texts)
    out = []
    for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        kind = KINDS[i % len(KINDS)]
        out.append(Memory.new(
            USER, text, kind.default_memory_type, kind, now=NOW - timedelta(days=i % 40),
            embedding=vector, domains=("ops",) if i % 4 == 0 else (),
            event_at=NOW - timedelta(days=i % 9) if kind is Kind.EVENT else None,
            access_count=i % 5, key=f"k{i}" if kind is Kind.PREFERENCE else None,
            provenance=Provenance(metadata={"n": i}),
        ))  # fmt: skip
    return out


def _gated(store: Any, message: str, *, explain: bool, budget: int | None) -> Gated:
    embedder = HashEmbedder(dim=64)
    return gate(store, lambda text: embedder.embed([text])[0], message, USER,
                options=GateOptions(), now=NOW, token_budget=budget, explain=explain)  # fmt: skip


@pytest.mark.parametrize("explain", [False, True])
@pytest.mark.parametrize("budget", [None, 300])
def test_the_gate_shows_the_same_block_building_only_what_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, explain: bool, budget: int | None
) -> None:
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 1)
    path = tmp_path / "notes.db"
    with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
        store.write(_notes(300))
    _image_saved(path)
    messages = ["how do we deploy the billing service?", "who reviews the search latency?",
                "what did we decide about invoices and docs on host 3?"]  # fmt: skip
    for message in messages:
        with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
            want = _gated(_Built(store), message, explain=explain, budget=budget)
            pool = _gated(_Built(store), message, explain=True, budget=budget).ranked
        with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
            assert isinstance(store, FoundSearch)
            got = _gated(store, message, explain=explain, budget=budget)
            decoded = store._cache(USER).snapshot.arrays.rows.decoded  # type: ignore[union-attr]
            found = decoded._found.values()
            built = {*decoded._entries, *(f.id for f in found if f._memory is not None)}
        assert got.text == want.text and got.tokens_used == want.tokens_used
        assert [s.memory for s in got.selected] == [s.memory for s in want.selected]
        assert [(s.score, s.similarity, s.tokens) for s in got.selected] == [
            (s.score, s.similarity, s.tokens) for s in want.selected
        ]
        assert got.decisions == want.decisions and got.ranked == want.ranked
        assert got.components == want.components
        assert got.selected, message
        shown = {s.memory.id for s in got.selected}
        assert len(pool) > len(shown)  # candidates not shown
        if explain:  # every candidate is returned with its decision: each one is built
            assert built == {s.memory.id for s in pool}
        else:
            assert built == shown


def test_the_gate_reads_the_texts_of_what_it_builds_not_of_every_candidate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A working set whose texts stay in the store (loaded from its image): the texts of
    the vector search's candidates are read when asked for, so a call whose stages ask for
    none reads those of the memories it builds, in one query (and BM25's matches', read
    with them), and the block is the one built memories give."""
    monkeypatch.setattr(columns, "PERSIST_MIN_ROWS", 1)
    path = tmp_path / "notes.db"
    with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
        # no procedural memory: none of the gate's rules reads a candidate's text
        store.write([m for m in _notes(360) if m.kind is not Kind.PREFERENCE])
    _image_saved(path)
    message = "how do we deploy the billing service?"
    with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
        want = _gated(_Built(store), message, explain=False, budget=300)
    with closing(SQLiteStore(path, ann_min_vectors=None)) as store:
        assert store.lexical_found(USER, "unmatched", 5) == []  # BM25 built, reading every text
        base = store._cache(USER).snapshot.arrays.rows.base  # type: ignore[union-attr]
        assert base is not None and isinstance(base.content, texts.RowTexts)
        reads: list[list[int]] = []
        read = base.content._read

        def counted(rows: Any) -> Any:
            reads.append(list(rows))
            return read(rows)

        base.content._read = counted
        got = _gated(store, message, explain=False, budget=300)
        decoded = store._cache(USER).snapshot.arrays.rows.decoded  # type: ignore[union-attr]
        found = list(decoded._found.values())
    assert got.text == want.text and got.selected == want.selected
    shown = {s.memory.id for s in got.selected}
    assert len(found) > 2 * len(shown) >= 2  # many candidates found, few shown
    # two reads: BM25's matches (at once: beside the query's embedding), the shown ones'
    assert len(reads) == 2
    read_ids = {base.ids[row] for rows in reads for row in rows}
    assert shown <= read_ids
    unread = {f.id for f in found} - read_ids  # the vector search's, never asked for
    assert len(unread) >= len(found) // 2


def test_a_row_found_is_found_again_with_its_new_count_and_fields(varied: Path) -> None:
    query = np.ones(8, dtype=np.float32) / np.sqrt(8)
    with closing(SQLiteStore(varied, ann_min_vectors=None)) as store:
        (first,) = store.search_found(USER, query, [(14, ALL)])
        rows = {f.id: f for f, _ in first}
        assert all(isinstance(f, Found) for f in rows.values())
        (again,) = store.search_found(USER, query, [(14, ALL)])
        assert all(f is rows[f.id] for f, _ in again)  # kept: found once
        store.record_uses(USER, ["m1", "m1"], NOW + timedelta(days=3))
        store.write(patches=[Patch(USER, "m2", {"content": "rewritten", "importance": 0.9})])
        (after,) = store.search_found(USER, query, [(14, ALL)])
        now = {f.id: f for f, _ in after}
        assert now["m1"] is not rows["m1"] and now["m2"] is not rows["m2"]
        assert now["m1"].access_count == rows["m1"].access_count + 2
        assert now["m1"].last_accessed_at == NOW + timedelta(days=3)
        assert (now["m2"].content, now["m2"].importance) == ("rewritten", 0.9)
        assert now["m3"] is rows["m3"]  # unchanged, still kept
        for fields in now.values():
            _same_fields(fields, store.get(USER, [fields.id])[0])
