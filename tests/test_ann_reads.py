"""What one search of a large user reads and sorts (issue 18, store/cache.py): the vectors
the index's candidates were scored with are the ones the built memories get (not read from
the rows a second time), a memory kept built reads none, and a write carries the record of
which rows the index holds (:class:`~engrain.store.ann_rows.AnnRows`) without sorting every
key again.

As in tests/test_ann.py the threshold is forced low and the index built inside the call."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.model import Kind
from engrain.store import MemoryFilter, vector_search
from engrain.store.ann import VectorIndex
from engrain.store.ann_rows import AnnRows
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _indexed, _memories, _vectors, _written

pytestmark = pytest.mark.usefixtures("through_the_index")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return _written(tmp_path / "engrain.db", 400)


@pytest.fixture
def store(db: Path) -> Iterator[SQLiteStore]:
    with closing(_indexed(db)) as opened:
        assert opened.wait_for_index(USER)
        opened.search(USER, _vectors(1, seed=1)[0], 5)
        arrays = opened._cache(USER).snapshot.arrays
        assert arrays is not None and arrays.matrix is None  # vectors read from the rows
        yield opened


def _counting(store: SQLiteStore) -> list[int]:
    """Rows read by the working set's vector reader from now on (one entry per read)."""
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None and arrays.held is not None and arrays.held.exact is not None
    read, counted = arrays.held.exact, []

    def counting(rowids: Any, ids: Sequence[str], dim: int, *, texts: bool = False) -> Any:
        counted.append(len(rowids))
        return read(rowids, ids, dim, texts=texts)

    object.__setattr__(arrays, "held", dataclasses.replace(arrays.held, exact=counting))
    return counted


def _exact(db: Path) -> dict[str, np.ndarray]:
    with closing(SQLiteStore(db, ann_min_vectors=None)) as exact:
        return {m.id: m.embedding for m in exact.query(USER) if m.embedding is not None}


def test_a_search_reads_each_candidate_vector_once(db: Path, store: SQLiteStore) -> None:
    originals = _exact(db)
    counted = _counting(store)
    query = _vectors(1, seed=21)[0]
    found = store.search(USER, query, 10, MemoryFilter(include_muted=False))
    # one read: the candidates, scored; the ten built memories take their vectors from it
    assert len(counted) == 1 and counted[0] >= 10
    assert len(found) == 10
    for memory, score in found:
        assert memory.embedding is not None
        assert np.array_equal(memory.embedding, originals[memory.id])
        assert not memory.embedding.flags.writeable
        assert abs(score - float(originals[memory.id] @ query)) < 1e-6


def test_memories_kept_built_read_no_vector(db: Path, store: SQLiteStore) -> None:
    originals = _exact(db)
    flt = MemoryFilter(include_muted=False)
    first = store.query(USER, flt, limit=30)  # built, with vectors read once
    counted = _counting(store)
    again = store.query(USER, flt, limit=30)
    assert [m.id for m in again] == [m.id for m in first]
    assert counted == []  # every one of them was kept built: nothing read
    arrays = store._cache(USER).snapshot.arrays
    assert arrays is not None
    kept = {str(i) for i in arrays.ids.tolist() if arrays.rows.decoded.get(str(i)) is not None}
    # 30 kept, 20 to build (fewer when the fixture's search already built some of them)
    more = store.query(USER, flt, limit=50)
    assert counted == [sum(m.id not in kept for m in more)]
    assert 15 <= counted[0] <= 20
    for memory in more:
        assert memory.embedding is not None
        assert np.array_equal(memory.embedding, originals[memory.id])


def _record(keys: np.ndarray, held: np.ndarray) -> AnnRows:
    return AnnRows.of(VectorIndex.__new__(VectorIndex), keys, held)


def _same(a: AnnRows, b: AnnRows, probe: np.ndarray) -> None:
    assert np.array_equal(a.keys, b.keys) and np.array_equal(a.held, b.held)
    assert np.array_equal(a.sorted_keys, b.sorted_keys)
    assert np.array_equal(a.rows_of(probe), b.rows_of(probe))
    assert not a.held.flags.writeable


def test_a_write_carries_the_key_order_instead_of_sorting_again() -> None:
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**63, 1_000, dtype=np.uint64)
    keys[7] = keys[3]  # a collision: both rows stay, the first in row order wins a lookup
    held = rng.random(1_000) < 0.9
    old = _record(keys, held.copy())
    fresh = np.concatenate([rng.integers(0, 2**63, 20, dtype=np.uint64), keys[[11, 3]]])
    unheld = [4, 500, 999]
    probe = np.concatenate([keys, fresh, rng.integers(0, 2**63, 50, dtype=np.uint64)])
    # a patch (no new row): the same order, only what is held changes
    patched = old.after_write(unheld, np.zeros(0, dtype=np.uint64))
    assert patched.sorted_keys is old.sorted_keys and patched.order is old.order
    want = held.copy()
    want[unheld] = False
    _same(patched, _record(keys, want), probe)
    # new rows: merged into the order, as if every key had been sorted again
    grown = old.after_write(unheld, fresh)
    grown_held = np.concatenate([want, np.zeros(len(fresh), dtype=bool)])
    _same(grown, _record(np.concatenate([keys, fresh]), grown_held), probe)
    # rows left out (a forget)
    keep = rng.random(len(grown.keys)) < 0.7
    keep[3] = False  # one of the colliding pair
    _same(grown.without(keep), _record(grown.keys[keep], grown.held[keep]), probe)


def test_a_promotion_keeps_every_row_findable(db: Path, store: SQLiteStore) -> None:
    """A patch (what a tenth use does) leaves every row found by its key; a new memory
    and a forgotten one are found, and not found, through the carried record."""
    memories = store.query(USER, limit=5)
    store.write([dataclasses.replace(memories[0], importance=0.5)])
    newcomer = _memories(1, seed=77)[0]
    store.write([newcomer])
    store.write(deletes=[memories[1]])
    snapshot = store._cache(USER).snapshot
    assert snapshot.ann is not None and snapshot.arrays is not None
    arrays = snapshot.arrays
    rows = snapshot.ann.rows_of(snapshot.ann.keys)
    assert np.array_equal(rows, np.arange(len(arrays)))
    assert newcomer.embedding is not None and newcomer.id in arrays.position
    assert memories[1].id not in arrays.position
    found = store.search(USER, newcomer.embedding, 3)
    assert found[0][0].id == newcomer.id
    gone = memories[1].embedding
    assert gone is not None
    assert memories[1].id not in {m.id for m, _ in store.search(USER, gone, 20)}


def test_a_broad_filter_asks_fewer_candidates_than_a_narrow_one(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over-fetching shrinks with the share of rows a filter keeps: k + 16 candidates when
    every row passes, twice k per share for a filter keeping a third of them."""
    asked: list[int] = []
    search = VectorIndex.search_similar

    def counting(
        index: VectorIndex, vector: np.ndarray, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        asked.append(count)
        return search(index, vector, count)

    monkeypatch.setattr(VectorIndex, "search_similar", counting)
    query = _vectors(1, seed=31)[0]
    assert len(store.search(USER, query, 10)) == 10
    facts = MemoryFilter(kinds=frozenset({Kind.FACT}))
    share = store.count(USER, facts) / store.count(USER)
    found = store.search(USER, query, 10, facts)
    assert len(found) == 10 and all(m.kind is Kind.FACT for m, _ in found)
    assert asked[0] == 10 + 16
    assert asked[1] == int(10 / share * vector_search.OVERFETCH) + 16
