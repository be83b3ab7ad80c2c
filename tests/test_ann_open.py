"""Opening a large user's saved approximate index checks its rows once (issue 18,
docs/scale.md "One user of 1,000,000 on SQLite", defect 1): ``IndexSlot.prepare`` hands
the mask it computed to the working set instead of the working set checking every row's
vector again, and the check reads the index :data:`~engrain.store.ann.HOLDS_CHUNK` rows at
a time on every path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engrain.model import Kind
from engrain.store import ann, vector_search
from engrain.store.ann import IndexSlot, Stash, VectorIndex, memory_keys
from engrain.store.sqlite import SQLiteStore
from tests.test_ann import USER, _ids, _vectors, _written


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return _written(tmp_path / "engrain.db", 600, ann_min_vectors=None)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the rows each ``VectorIndex._holds`` call (one chunk) compares."""
    chunks: list[int] = []
    original = VectorIndex._holds

    def spy(self: VectorIndex, keys: ann.Keys, vectors: ann.Matrix) -> ann.BoolArray:
        chunks.append(len(keys))
        return original(self, keys, vectors)

    monkeypatch.setattr(VectorIndex, "_holds", spy)
    return chunks


def test_a_saved_index_is_checked_once_in_chunks_when_a_process_opens_it(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = SQLiteStore(db, ann_min_vectors=0, ann_background=False)
    assert first.wait_for_index(USER)
    first.close()
    monkeypatch.setattr(vector_search, "EXACT_SUBSET", 20)
    monkeypatch.setattr(ann, "HOLDS_CHUNK", 64)
    chunks = _counting(monkeypatch)
    reopened = SQLiteStore(db, ann_min_vectors=0, ann_background=False)
    rows = reopened.query(USER)
    assert reopened.wait_for_index(USER)
    # each row once (twice before), and each of the 200 preferences once more: the
    # learnings' own index (store/ann_kinds.py) is checked like the first
    learnings = sum(m.kind is Kind.PREFERENCE for m in rows)
    assert sum(chunks) == len(rows) + learnings == 600 + 200
    assert max(chunks) <= 64
    record = reopened._cache(USER).snapshot.ann
    assert record is not None and record.held.all()  # the mask handed over: every row held
    # each memory is its own nearest neighbour; the graph may miss one now and then (an
    # approximate search: about 1 lookup in 300 here, also before the mask was handed over)
    found = 0
    for memory in rows[:20]:
        assert memory.embedding is not None
        found += _ids(reopened.search(USER, memory.embedding, 1)) == [memory.id]
    assert found >= 18
    reopened.close()


def test_prepare_hands_over_which_rows_the_loaded_index_holds() -> None:
    vectors = _vectors(300)
    keys = memory_keys([f"m{i}" for i in range(300)])
    saved: dict[str, bytes] = {}
    stash = Stash(read=lambda: saved.get("x"), write=lambda b: saved.__setitem__("x", b),
                  later=lambda job: job())  # fmt: skip
    saved["x"] = VectorIndex.build(keys[:200], vectors[:200], threads=1).dump()
    moved = vectors.copy()
    moved[:10] = _vectors(10, seed=99)  # re-embedded since the index was saved
    slot = IndexSlot(stash, min_vectors=0, background=False)
    index, held = slot.prepare(keys, moved)
    assert slot.index is index
    # patched with the 100 new rows and the 10 moved ones: every row held, as checked
    assert held.shape == (300,) and held.all()
    assert (index.holds(keys, moved) == held).all()
    stale = VectorIndex.load(saved["x"], vectors.shape[1])
    assert stale is not None and stale.holds(keys, moved).all()  # saved after the patch


def test_prepare_reports_a_row_the_index_cannot_hold() -> None:
    vectors = _vectors(120)
    vectors[5] = 0.0  # no direction: a cosine index does not hold it as it is
    keys = memory_keys([f"m{i}" for i in range(120)])
    slot = IndexSlot(None, min_vectors=0, background=False)
    index, held = slot.prepare(keys, vectors)
    assert (held == index.holds(keys, vectors)).all()
    assert held[np.arange(120) != 5].all()


def _wide(keys: ann.Keys, vectors: ann.Matrix, dtype: str, metric: str = "cos") -> bytes:
    """The saved copy of an index holding ``vectors`` as ``dtype`` (what an earlier
    version saved: float16), framed like :meth:`VectorIndex.dump`."""
    index = ann._usearch()(
        ndim=vectors.shape[1], metric=metric, dtype=dtype, connectivity=ann.CONNECTIVITY,
        expansion_add=ann.EXPANSION_ADD, expansion_search=ann.EXPANSION_SEARCH,
    )  # fmt: skip
    index.add(keys, vectors, threads=1)
    return VectorIndex(index).dump()


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_a_wider_saved_index_is_loaded_as_int8_with_its_graph(dtype: str) -> None:
    vectors = _vectors(500, seed=3)
    keys = memory_keys([f"m{i}" for i in range(500)])
    saved = _wide(keys, vectors, dtype)
    loaded = VectorIndex.load(saved, vectors.shape[1])
    assert loaded is not None and loaded.lossy and loaded.converted
    assert len(loaded) == 500
    assert loaded.holds(keys, vectors).all()  # each row's vector, quantized as usearch does
    # stored as building an int8 index from these vectors stores them (within one step)
    built = VectorIndex.build(keys, vectors, threads=1)
    mine, theirs = (np.asarray(i._index.get(keys, dtype="i8"), dtype=np.int16)
                    for i in (loaded, built))  # fmt: skip
    assert np.abs(mine - theirs).max() <= 1
    # the graph is the saved one: the same edges, only the vectors' type changed
    header = ann._HEADER.size
    wide = memoryview(saved)[header:]
    narrow = loaded.dump()[header:]
    rows, width = ann._MATRIX.unpack_from(wide)
    graph_at = ann._MATRIX.size + rows * width + ann._HEAD_SIZE
    assert bytes(narrow[-(len(wide) - graph_at) :]) == bytes(wide[graph_at:])
    assert len(narrow) == len(wide) - rows * (width - vectors.shape[1])
    # and it finds what it holds: a memory's own vector among its nearest keys
    found = sum(int(keys[i]) in loaded.search(vectors[i], 5).tolist() for i in range(50))
    assert found >= 48


def test_only_a_cosine_float_index_in_the_known_layout_is_converted() -> None:
    vectors = _vectors(200, seed=4)
    keys = memory_keys([f"m{i}" for i in range(200)])
    header = ann._HEADER.size

    def payload(data: bytes) -> memoryview:
        return memoryview(data)[header:]

    assert ann.int8_payload(payload(VectorIndex.build(keys, vectors, threads=1).dump())) is None
    inner = _wide(keys, vectors, "f16", metric="ip")
    assert ann.int8_payload(payload(inner)) is None  # not cosine: not quantized this way
    wide = _wide(keys, vectors, "f16")
    assert ann.int8_payload(payload(wide)) is not None
    other = bytearray(payload(wide))
    rows, width = ann._MATRIX.unpack_from(other)
    head_end = ann._MATRIX.size + rows * width + ann._HEAD_SIZE
    assert ann.int8_payload(payload(wide)[: head_end - 1]) is None  # cut short
    other[ann._MATRIX.size + rows * width : ann._MATRIX.size + rows * width + 7] = b"xsearch"
    assert ann.int8_payload(memoryview(other)) is None  # not usearch's head where expected
    assert ann.int8_payload(memoryview(b"\x00" * 4)) is None
    dot = VectorIndex.load(inner, vectors.shape[1])  # loaded as it is, as before
    assert dot is not None and not dot.lossy and not dot.converted


def test_prepare_saves_a_converted_index_once_without_building_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vectors = _vectors(300, seed=5)
    keys = memory_keys([f"m{i}" for i in range(300)])
    saved: dict[str, bytes] = {"x": _wide(keys, vectors, "f16")}
    writes: list[int] = []

    def write(data: bytes) -> None:
        writes.append(len(data))
        saved["x"] = data

    stash = Stash(read=lambda: saved.get("x"), write=write, later=lambda job: job())
    monkeypatch.setattr(VectorIndex, "build", None)  # a build would fail the test
    slot = IndexSlot(stash, min_vectors=0, background=False)
    index, held = slot.prepare(keys, vectors)
    assert held.all() and index.lossy and not index.converted
    assert len(writes) == 1  # saved as int8 at once
    again = VectorIndex.load(saved["x"], vectors.shape[1])
    assert again is not None and again.lossy and not again.converted
    assert again.holds(keys, vectors).all()
    second = IndexSlot(stash, min_vectors=0, background=False)
    second.prepare(keys, vectors)
    assert len(writes) == 1  # nothing to save the second time
