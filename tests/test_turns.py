"""A conversation chunk found by its best turn (recall.turns, issue 15)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from engrain.embed.cache import CachedEmbedder
from engrain.ingest.chunk import turn_lines
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector, content_hash
from engrain.recall import turns
from engrain.recall.turns import turn_similarity, with_turns
from engrain.store.base import ALL, MemoryFilter, Store
from engrain.store.memory import MemoryStore
from engrain.store.transfer import copy_store

from .conftest import NOW

WORDS = ("museum", "kids", "hiking", "weather", "pottery", "dog", "hello", "thanks")


class WordEmbedder:
    """One dimension per word of ``words`` (normalised counts, each mark of ``punctuation``
    read as a space), so cosines are known; counts the texts it embeds."""

    def __init__(
        self, words: Sequence[str] = WORDS, punctuation: str = ":.", model_id: str = "words"
    ) -> None:
        self.words = tuple(words)
        self.punctuation = punctuation
        self.model_id = model_id
        self.dim = len(self.words)
        self.embedded: list[str] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.embedded.extend(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            lowered = text.lower()
            for mark in self.punctuation:
                lowered = lowered.replace(mark, " ")
            for word in lowered.split():
                if word in self.words:
                    out[row, self.words.index(word)] += 1.0
            norm = np.linalg.norm(out[row])
            out[row] = out[row] / norm if norm else out[row]
        return out

    def embed_query(self, text: str) -> Vector:
        vector: Vector = self.embed([text])[0]
        return vector


def _chunk(content: str, vector: Vector, turn: str, **fields: object) -> Memory:
    return Memory.new("u", content, MemoryType.EPISODIC, Kind.EVENT, now=NOW, embedding=vector,
                      provenance=Provenance(turn_ids=(turn,)), **fields)  # fmt: skip


def _axis(word: str) -> Vector:
    vector = np.zeros(len(WORDS), dtype=np.float32)
    vector[WORDS.index(word)] = 1.0
    return vector


def _setup(store: Store) -> tuple[CachedEmbedder, Memory, Memory]:
    embedder = CachedEmbedder(WordEmbedder(), store)
    # the chunk vector says "hiking" (a diluted or truncated embedding); its second turn is
    # about the museum
    deep = _chunk("A: hiking hiking.\nB: museum kids.", _axis("hiking"), "D1:1")
    near = _chunk("A: weather museum.\nB: dog.", _axis("weather") * 0.6 + _axis("museum") * 0.8,
                  "D1:3")  # fmt: skip
    store.write([deep, near])
    return embedder, deep, near


def test_turn_lines_are_the_non_blank_lines_stripped() -> None:
    assert turn_lines("A: hi.\n\n  B: yes.  \n") == ["A: hi.", "B: yes."]
    assert turn_lines("one line") == ["one line"]


def test_turn_similarity_is_at_least_the_chunks_own() -> None:
    assert turn_similarity(0.2, 0.9, 1.0) == pytest.approx(0.9)
    assert turn_similarity(0.2, 0.9, 0.5) == pytest.approx(0.55)
    assert turn_similarity(0.6, 0.1, 1.0) == pytest.approx(0.6)  # a chunk never loses
    assert turn_similarity(0.2, 0.9, 0.0) == pytest.approx(0.2)


def test_a_chunk_missed_by_its_own_vector_is_found_by_its_best_turn() -> None:
    store = MemoryStore()
    embedder, deep, near = _setup(store)
    query = embedder.embed_query("museum kids")
    dense = store.search("u", query, 1, ALL)
    assert [m.id for m, _ in dense] == [near.id]
    found = with_turns(store, embedder.embed_query, "u", query, dense, 1, ALL, 1.0)
    assert [m.id for m, _ in found] == [deep.id, near.id]
    assert found[0][1] == pytest.approx(1.0)  # "B: museum kids." is the query
    # the near chunk's best line ("weather museum", 0.5) is below its own vector (0.57)
    assert found[1][1] == pytest.approx(dense[0][1]) == pytest.approx(0.8 / np.sqrt(2.0))
    # off: the dense list as it was
    assert with_turns(store, embedder.embed_query, "u", query, dense, 1, ALL, 0.0) == dense


def test_a_memory_without_turns_costs_nothing() -> None:
    store = MemoryStore()
    inner = WordEmbedder()
    embedder = CachedEmbedder(inner, store)
    note = Memory.new("u", "museum kids\nhiking", MemoryType.SEMANTIC, Kind.FACT, now=NOW,
                      embedding=_axis("museum"))  # fmt: skip
    store.write([note])
    dense = store.search("u", _axis("museum"), 5, ALL)
    assert (
        with_turns(store, embedder.embed_query, "u", _axis("museum"), dense, 5, ALL, 1.0) == dense
    )
    assert inner.embedded == []  # no index built


def test_the_filter_applies_to_chunks_found_by_a_turn() -> None:
    store = MemoryStore()
    embedder, deep, near = _setup(store)
    store.write([deep.evolve(muted=True)])
    flt = MemoryFilter(include_muted=False)
    query = embedder.embed_query("museum kids")
    dense = store.search("u", query, 1, flt)
    found = with_turns(store, embedder.embed_query, "u", query, dense, 1, flt, 1.0)
    assert [m.id for m, _ in found] == [near.id]


def test_forgotten_and_edited_chunks_leave_the_index(store: Store) -> None:
    embedder, deep, near = _setup(store)
    query = embedder.embed_query("museum kids")
    dense = store.search("u", query, 1, ALL)
    assert deep.id in [m.id for m, _ in with_turns(store, embedder.embed_query, "u", query,
                                                   dense, 1, ALL, 1.0)]  # fmt: skip
    edited = deep.evolve(
        content="A: hiking hiking.\nB: pottery dog.",
        content_hash=content_hash("A: hiking hiking.\nB: pottery dog."),
    )
    store.write([edited])
    found = with_turns(store, embedder.embed_query, "u", query, store.search("u", query, 1, ALL),
                       1, ALL, 1.0)  # fmt: skip
    assert [m.id for m, _ in found] == [near.id]  # its museum line is gone
    index = turns.indexes(store).of(store, "u", embedder.embed)
    assert not index.lines(deep.id)[:, WORDS.index("museum")].any()
    store.write(deletes=[edited])
    found = with_turns(store, embedder.embed_query, "u", query, store.search("u", query, 1, ALL),
                       1, ALL, 1.0)  # fmt: skip
    assert deep.id not in [m.id for m, _ in found]
    assert turns.indexes(store).of(store, "u", embedder.embed).ids == (near.id,)


def test_an_unchanged_chunk_keeps_its_vectors_across_revisions() -> None:
    store = MemoryStore()
    inner = WordEmbedder()
    _, deep, near = _setup(store)
    turns.indexes(store).of(store, "u", inner.embed)
    inner.embedded.clear()
    store.write([_chunk("A: pottery.\nB: thanks.", _axis("pottery"), "D2:1")])
    index = turns.indexes(store).of(store, "u", inner.embed)
    assert inner.embedded == ["A: pottery.", "B: thanks."]
    assert {deep.id, near.id} < set(index.ids) and len(index.ids) == 3


def test_a_copy_carries_the_cached_line_vectors(tmp_path: Path) -> None:
    source, target = MemoryStore(), MemoryStore()
    embedder, deep, _ = _setup(source)
    embedder.embed(turn_lines(deep.content))
    copy_store(source, target, cache_models=["words"])
    hashes = [content_hash(line) for line in turn_lines(deep.content)]
    assert set(target.cached_embeddings("words", hashes)) == set(hashes)


def test_the_locomo_ablation_turns_the_best_turn_off() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import locomo

    chosen = locomo.variants("gated")
    names = {v.name: v.options for v in chosen}
    assert len(names) == len(chosen)  # each variant's results are kept under its own name
    assert names["turn-weight"]["turn_weight"] == 0.5
    assert "turn_weight" not in names["turns"]  # one memory per turn, a different store
    assert "turn_weight" not in names["engrain"]


def test_off_by_default_a_recall_builds_no_index(tmp_path: Path) -> None:
    from engrain import Engine, Turn
    from engrain.recall.gate import GateOptions

    from .conftest import make_settings

    store = MemoryStore()
    inner = WordEmbedder()
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=inner)
    turns_ = [Turn("A", "hiking hiking.", "D1:1", NOW), Turn("B", "museum kids.", "D1:2", NOW)]
    engine.ingest_conversation(turns_, "u", "s1", now=NOW)
    assert GateOptions().turn_weight == 0.0
    inner.embedded.clear()
    engine.explain("Who took the kids to the museum?", "u", now=NOW)
    assert inner.embedded == ["Who took the kids to the museum?"]
    on = engine.options.update(turn_weight=0.5)
    engine.explain("Who took the kids to the museum?", "u", options=on, now=NOW)
    assert "B: museum kids." in inner.embedded  # the lines, embedded once and cached
