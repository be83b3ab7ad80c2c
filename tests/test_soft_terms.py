"""A question's words met by their nearest word in a conversation chunk (recall.soft_terms)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from engrain.embed import CachedEmbedder, HashEmbedder, minilm
from engrain.model import Kind, Memory, MemoryType, Provenance, content_hash
from engrain.recall import pool_rules
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate
from engrain.recall.soft_terms import (
    SOFT_TERMS_DEFAULT,
    SOFT_TERMS_WEIGHT,
    WordVectors,
    batch_embedder,
    chunk_words,
    coverages,
    question_words,
    with_soft_terms,
)

from .conftest import NOW

#: Word → a direction: "instruments" and "violin" share one, everything else its own.
_AXES = {"instruments": 0, "violin": 0, "play": 1, "melanie": 2}


class WordEmbedder:
    """A batch embedder whose words lie on fixed axes; it counts what it is asked."""

    model_id = "words-test"
    dim = 16

    def __init__(self) -> None:
        self.asked: list[str] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One unit row per text: its axis, or an axis of its own (by hash) past 8."""
        self.asked.extend(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, _AXES.get(text, 8 + sum(map(ord, text)) % 8)] = 1.0
        return out


def _chunk(mid: str, content: str, relevance: float, *, turns: bool = True) -> Candidate:
    memory = Memory(
        id=mid, user_id="u", content=content, memory_type=MemoryType.EPISODIC, kind=Kind.EVENT,
        created_at=NOW, updated_at=NOW,
        provenance=Provenance(turn_ids=(f"{mid}:1",) if turns else ()),
    )  # fmt: skip
    return Candidate(memory, 0.3, 0.0, relevance)


def test_question_words_leave_out_stopwords_and_names() -> None:
    assert question_words("What instruments does Melanie play?") == ("instruments", "play")
    assert question_words("Exercises John has done, exercises") == ("exercises", "done")
    assert question_words("What is it?") == ()


def test_chunk_words_are_distinct_content_words() -> None:
    assert chunk_words("Melanie: I play my violin, Caroline's violin too.") == (
        "melanie", "play", "violin", "caroline",
    )  # fmt: skip


def test_coverage_is_the_mean_of_each_question_words_best_match() -> None:
    terms = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    words = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    flat = np.array([0, 1, 0, 2], dtype=np.intp)
    out = coverages(terms, words, flat, [1, 1, 2, 0])
    assert out == pytest.approx([0.5, 0.7, 1.0, 0.0])


def test_a_chunk_naming_an_instance_of_the_asked_category_moves_up() -> None:
    pool = [
        _chunk("a", "Melanie: The weather was lovely at the beach today.", 0.9),
        _chunk("note", "a typed note", 0.85, turns=False),
        _chunk("b", "Melanie: Weekends are for the kids and the garden.", 0.8),
        _chunk("c", "Melanie: I keep practising my violin every evening.", 0.5),
    ]
    embedder = WordEmbedder()
    out = with_soft_terms(pool, "What instruments does Melanie play?",
                          (embedder.model_id, embedder.embed), 1.0, WordVectors())  # fmt: skip
    assert [c.id for c in out] == ["c", "note", "a", "b"]
    assert [c.relevance for c in out] == [0.9, 0.85, 0.8, 0.5]  # the values handed out again
    assert out[1] is pool[1]  # not a chunk: untouched


def test_nothing_changes_when_off_without_an_embedder_or_a_word() -> None:
    pool = [
        _chunk("a", "Melanie: The weather was lovely.", 0.9),
        _chunk("c", "Melanie: My violin is new.", 0.5),
    ]
    embedder = WordEmbedder()
    pair = (embedder.model_id, embedder.embed)
    question = "What instruments does Melanie play?"
    assert with_soft_terms(pool, question, pair, 0.0) == pool
    assert with_soft_terms(pool, question, None, 1.0) == pool
    assert with_soft_terms(pool, "What is it?", pair, 1.0) == pool
    assert with_soft_terms(pool[1:], question, pair, 1.0) == pool[1:]
    assert embedder.asked == []


def test_word_vectors_embed_each_word_once_and_start_afresh_when_full() -> None:
    embedder = WordEmbedder()
    words = WordVectors(capacity=3)
    first = words.matrix("m", ["violin", "play"], embedder.embed)
    again = words.matrix("m", ["play", "violin"], embedder.embed)
    assert embedder.asked == ["violin", "play"]
    assert np.array_equal(first[::-1], again)
    assert np.array_equal(first, embedder.embed(["violin", "play"]))
    embedder.asked.clear()
    both = words.matrix("m", ["melanie", "garden", "violin"], embedder.embed)  # 4 > 3: afresh
    assert len(words) == 3
    assert np.array_equal(both, embedder.embed(["melanie", "garden", "violin"]))
    embedder.asked.clear()
    words.matrix("m", ["garden", "violin"], embedder.embed)
    assert embedder.asked == []  # kept
    words.matrix("other", ["violin"], embedder.embed)  # another model: its own vectors
    assert embedder.asked == ["violin"]


def test_the_batch_embedder_reads_the_store_cache_and_writes_no_word() -> None:
    raw = HashEmbedder()
    store = _Cache()
    marker = np.full(raw.dim, 0.05, dtype=np.float32)
    store.kept[content_hash("violin")] = marker  # made at ingest
    cached = CachedEmbedder(raw, cache=store)
    found = batch_embedder(cached.embed_query)
    assert found is not None
    assert found[0] == raw.model_id
    vectors = np.asarray(found[1](["violin", "instruments"]))
    assert np.array_equal(vectors[0], marker)  # read from the store's cache
    assert np.array_equal(vectors[1], raw.embed(["instruments"])[0])  # embedded...
    assert set(store.kept) == {content_hash("violin")}  # ...and not written
    assert cached.embed(["instruments"]) is not None
    assert content_hash("instruments") in store.kept  # the cache's own embed writes
    unwrapped = batch_embedder(raw.embed)
    assert unwrapped is not None and unwrapped[1] == raw.embed
    assert batch_embedder(lambda text: text) is None


class _Cache:
    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}

    def cached_embeddings(self, model_id: str, hashes: Sequence[str]) -> dict[str, Any]:
        return {h: self.kept[h] for h in hashes if h in self.kept}

    def cache_embeddings(self, model_id: str, vectors: dict[str, Any]) -> None:
        self.kept.update(vectors)


class _TableModel(HashEmbedder):
    """The hashing embedder under the id of the model that has a word table."""

    @property
    def model_id(self) -> str:
        return minilm.MODEL_ID


def _weights_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   embedder: HashEmbedder) -> list[tuple[str | None, float]]:  # fmt: skip
    """The word source and weight the gate hands the rule: automatic (None), set to the
    weight, set to 0."""
    from engrain import Engine, Settings, Turn

    asked: list[tuple[str | None, float]] = []
    original = with_soft_terms

    def spy(pool: Any, message: str, embedder: Any, weight: float) -> list[Candidate]:
        asked.append((None if embedder is None else embedder[0], weight))
        return original(pool, message, embedder, weight)

    monkeypatch.setattr(pool_rules, "with_soft_terms", spy)
    engine = Engine(settings=Settings(data_dir=tmp_path), embedder=embedder)
    turns = [
        Turn("Melanie", "I keep practising my violin every evening.", "D1:1", NOW),
        Turn("Caroline", "That is lovely, how long have you played?", "D1:2", NOW),
    ]
    engine.ingest_conversation(turns, "u", "session_1", now=NOW)
    question = "What instruments does Melanie play?"
    for setting in (None, SOFT_TERMS_WEIGHT, 0.0):
        engine.explain(question, "u", token_budget=500, now=NOW,
                       options=engine.options.update(soft_terms=setting))  # fmt: skip
    engine.close()
    return asked


def test_gate_reads_the_word_table_when_automatic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = f"{minilm.MODEL_ID}/words"
    asked = _weights_asked(tmp_path, monkeypatch, _TableModel())
    assert asked == [(words, SOFT_TERMS_WEIGHT), (words, SOFT_TERMS_WEIGHT), (words, 0.0)]


def test_soft_terms_are_off_by_default() -> None:
    """Off (they add nothing on LoCoMo once the search without names is on); None turns
    them on where the model has a word table (the tests above)."""
    assert GateOptions().soft_terms == SOFT_TERMS_DEFAULT == 0.0


def test_a_model_without_a_table_runs_it_only_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = HashEmbedder().model_id
    asked = _weights_asked(tmp_path, monkeypatch, HashEmbedder())
    assert asked == [(None, 0.0), (model, SOFT_TERMS_WEIGHT), (None, 0.0)]


@pytest.mark.model
def test_minilm_puts_a_category_near_its_instances(minilm: Any) -> None:
    """The reason the rule works: MiniLM's vector of a category word is nearer its
    instances than an unrelated word."""
    vectors = minilm.embed(["instruments", "violin", "exercises", "yoga", "kitchen"])
    sims = vectors @ vectors.T
    assert sims[0, 1] > sims[0, 4] + 0.2
    assert sims[2, 3] > sims[2, 4] + 0.2


def test_the_kept_rows_of_a_chunk_give_what_its_words_give(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast path (each chunk's word rows kept, every distinct word's vector read once)
    orders a pool exactly as looking every word up again does, the second call too."""
    embedder = WordEmbedder()
    contents = ["Melanie: playing my violin tonight", "Caroline: the garden was lovely",
                "Melanie: ok!", "Caroline: my violin teacher and the garden club",
                "Melanie: practising scales on the violin, then the garden"]  # fmt: skip
    pool = [_chunk(f"c{i}", text, 0.5 - 0.05 * i) for i, text in enumerate(contents)]
    question = "What instruments does Melanie play in the garden?"
    words = WordVectors()
    fast = with_soft_terms(pool, question, ("m", embedder.embed), words_of=words)
    again = with_soft_terms(pool, question, ("m", embedder.embed), words_of=words)
    monkeypatch.setattr(WordVectors, "rows_of", lambda *args: None)
    slow = with_soft_terms(pool, question, ("m", embedder.embed), words_of=WordVectors())
    order = [c.memory.id for c in fast]
    assert order == [c.memory.id for c in slow] == [c.memory.id for c in again]
    assert [c.relevance for c in fast] == [c.relevance for c in slow]
    assert order[0] == "c3"  # violin and garden: lifted over c0
    assert order != [c.memory.id for c in pool]


def test_rows_of_answers_none_when_the_table_started_afresh() -> None:
    embedder = WordEmbedder()
    words = WordVectors(capacity=2)
    assert words.rows_of("m", ["violin"], ["garden"], embedder.embed) is not None
    # three new words do not fit beside two: the table starts afresh with them alone
    assert words.rows_of("m", ["violin"], ["melanie plays piano"], embedder.embed) is None
