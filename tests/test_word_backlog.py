"""The chunks' word vectors made at ingest and kept in the store (recall.word_backlog)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from engrain import Engine, Settings, Turn
from engrain.embed import HashEmbedder, minilm
from engrain.embed.base import Matrix
from engrain.model import content_hash
from engrain.recall import soft_terms
from engrain.recall.soft_terms import (
    SOFT_TERMS_WEIGHT,
    WordVectors,
    batch_embedder,
    chunk_words,
    with_soft_terms,
)
from engrain.recall.word_backlog import WordBacklog
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW
from .test_soft_terms import _chunk

TURNS = [
    Turn("Melanie", "I keep practising my violin every evening after dinner.", "D1:1", NOW),
    Turn("Caroline", "That is lovely, how long have you played the clarinet?", "D1:2", NOW),
]
WORDS = sorted({w for t in TURNS for w in chunk_words(f"{t.speaker}: {t.text}")})


class Counting(HashEmbedder):
    """The hashing embedder, remembering every text it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.asked.extend(texts)
        return super().embed(texts)


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> WordVectors:
    """A fresh process table for the engine's backlog (the gate's default stays apart)."""
    fresh = WordVectors()
    monkeypatch.setattr(soft_terms, "WORDS", fresh)
    return fresh


def _engine(path: Path, embedder: Counting) -> Engine:
    """An engine on ``path`` with soft terms on (they are off by default)."""
    engine = Engine(settings=Settings(data_dir=path.parent), store=SQLiteStore(path),
                    embedder=embedder)  # fmt: skip
    engine.options = engine.options.update(soft_terms=SOFT_TERMS_WEIGHT)
    return engine


def test_ingest_makes_the_chunks_word_vectors_and_the_store_keeps_them(
    tmp_path: Path, table: WordVectors
) -> None:
    raw = Counting()
    engine = _engine(tmp_path / "m.db", raw)
    engine.ingest_conversation(TURNS, "u", "session_1", now=NOW)
    engine.wait()
    assert table.missing(raw.model_id, WORDS) == []
    assert set(WORDS) <= set(raw.asked)
    kept = engine.store.cached_embeddings(raw.model_id, [content_hash(w) for w in WORDS])
    assert len(kept) == len(WORDS)
    assert np.allclose(kept[content_hash("violin")], raw.embed(["violin"])[0])
    engine.close()

    # a new process: nothing in its table, the words read back from the store
    raw = Counting()
    engine = _engine(tmp_path / "m.db", raw)
    fresh = WordVectors()
    pool = [_chunk("a", "Melanie: playing my violin tonight", 0.5),
            _chunk("b", "Caroline: the clarinet was lovely", 0.4)]  # fmt: skip
    with_soft_terms(pool, "What does Melanie practise every evening?",
                    batch_embedder(engine.embedder.embed_query), words_of=fresh)  # fmt: skip
    stored = ["violin", "clarinet", "lovely", "melanie", "caroline", "evening"]
    assert set(stored) <= set(WORDS)
    assert fresh.missing(raw.model_id, stored) == []  # read from the store...
    assert not set(raw.asked) & set(stored)  # ...not embedded again
    assert "tonight" in raw.asked  # a word the store never met is embedded
    engine.close()


def test_with_soft_terms_off_ingest_embeds_no_word(tmp_path: Path, table: WordVectors) -> None:
    raw = Counting()
    engine = Engine(settings=Settings(data_dir=tmp_path), store=SQLiteStore(tmp_path / "m.db"),
                    embedder=raw)  # fmt: skip
    engine.ingest_conversation(TURNS, "u", "session_1", now=NOW)
    engine.remember("Melanie's violin teacher is called Ana", "u")
    engine.wait()
    assert not set(raw.asked) & set(WORDS)
    assert len(engine.word_backlog) == 0 and len(table) == 0
    engine.close()


def test_a_learning_queues_no_word(tmp_path: Path, table: WordVectors) -> None:
    raw = Counting()
    engine = _engine(tmp_path / "m.db", raw)
    engine.remember("The deploy script lives in scripts/deploy.sh", "u")
    engine.wait()
    assert raw.asked == ["The deploy script lives in scripts/deploy.sh"]
    engine.close()


def test_the_backlog_queues_only_words_the_table_lacks_and_drains_once() -> None:
    raw = Counting()
    table = WordVectors()
    table.matrix(raw.model_id, ["violin"], raw.embed)
    backlog = WordBacklog(raw.model_id, raw.embed, table)
    raw.asked.clear()
    assert backlog.add(["Melanie: my violin and my clarinet"])
    assert len(backlog) == 2  # melanie, clarinet: violin is held
    assert backlog.drain() == 2
    assert sorted(raw.asked) == ["clarinet", "melanie"]
    assert backlog.drain() == 0 and not backlog.add(["violin clarinet"])
    assert len(raw.asked) == 2


def test_only_a_set_weight_without_a_word_table_runs_the_words_through_the_model() -> None:
    raw = Counting()
    backlog = WordBacklog(raw.model_id, raw.embed)
    assert backlog.wanted(SOFT_TERMS_WEIGHT)
    assert not backlog.wanted(None) and not backlog.wanted(0.0)
    table_model = WordBacklog(minilm.MODEL_ID, raw.embed)
    assert not table_model.wanted(SOFT_TERMS_WEIGHT) and not table_model.wanted(None)
