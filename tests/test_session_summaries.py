"""Session summaries as extra candidates (recall.summaries, issue 15; off by default)."""

from __future__ import annotations

from pathlib import Path

from engrain import Engine, Turn
from engrain.embed.cache import CachedEmbedder
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall import summaries
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate
from engrain.recall.summaries import (
    pick_turns,
    session_turns,
    summarise_session,
    summary_id,
    with_summaries,
)
from engrain.store.base import ALL, MemoryFilter, Store
from engrain.store.memory import MemoryStore

from .conftest import NOW, make_settings
from .test_turns import WordEmbedder


def _chunk(content: str, ids: tuple[str, ...], session: str = "s1", **fields: object) -> Memory:
    return Memory.new("u", content, MemoryType.EPISODIC, Kind.EVENT, now=NOW, session_id=session,
                      provenance=Provenance(ids), **fields)  # fmt: skip


CHUNKS = (
    _chunk("A: Hello!\nB: We took the kids to the Louvre Museum in May. It was great fun.",
           ("D1:1", "D1:2")),
    _chunk("A: My dog Rex is 3 now.\nB: Nice.", ("D1:3", "D1:4")),
)  # fmt: skip


def test_a_summary_is_the_turns_that_cover_the_sessions_terms_and_names_them() -> None:
    summary = summarise_session("u", "s1", CHUNKS)
    assert summary is not None
    assert summary.content == (
        "B: We took the kids to the Louvre Museum in May. It was great fun.\n"
        "A: My dog Rex is 3 now."
    )  # "Hello!" and "Nice." add no name, number or date
    assert summary.provenance.turn_ids == ("D1:2", "D1:3")
    assert summary.id == summary_id("u", "s1") != summary_id("u", "s2")
    assert summary.kind is Kind.SUMMARY and summary.memory_type is MemoryType.EPISODIC
    assert summary.event_at == min(m.when for m in CHUNKS) and summary.session_id == "s1"


def test_turns_are_picked_within_the_word_limit_in_spoken_order() -> None:
    lines = ["A: I love Rex.", "B: Paris and Rome in 2021 with Ann.", "A: Hi!", "B: We saw Oslo."]
    assert pick_turns(lines) == [0, 1, 3]
    assert pick_turns(lines, max_words=8) == [1]  # the most terms first, then nothing fits
    assert pick_turns(["A: Hi!", "B: Thanks, bye!"]) == []


def test_a_chunk_whose_lines_are_not_its_turns_gives_no_turns() -> None:
    split = _chunk("A: a long turn.\nA: its second half.", ("D1:1",))
    assert session_turns([split, CHUNKS[1]]) == [("A: My dog Rex is 3 now.", "D1:3"),
                                                 ("B: Nice.", "D1:4")]  # fmt: skip


def test_a_session_without_a_term_has_no_summary() -> None:
    only = _chunk("A: Hi!\nB: Thanks, bye!", ("D1:1", "D1:2"))
    assert summarise_session("u", "s1", [only]) is None


def _pool(store: Store, embedder: CachedEmbedder, message: str) -> list[Candidate]:
    vector = embedder.embed_query(message)
    return [Candidate(m, float(m.embedding @ vector), 0.0, 0.5)  # type: ignore[operator]
            for m in store.query("u") if m.embedding is not None]  # fmt: skip


def _store() -> tuple[MemoryStore, CachedEmbedder, WordEmbedder]:
    store = MemoryStore()
    inner = WordEmbedder()
    embedder = CachedEmbedder(inner, store)
    vectors = embedder.embed([m.content for m in CHUNKS])
    store.write([m.evolve(embedding=v) for m, v in zip(CHUNKS, vectors, strict=True)])
    return store, embedder, inner


def test_the_best_summaries_join_the_pool_and_only_when_asked() -> None:
    store, embedder, _ = _store()
    pool = _pool(store, embedder, "dog")
    assert with_summaries(pool, store, embedder.embed_query, "u", "dog", None, ALL, 0) == pool
    joined = with_summaries(pool, store, embedder.embed_query, "u", "dog", None, ALL, 1)
    added = [c for c in joined if c.memory.kind is Kind.SUMMARY]
    assert len(joined) == len(pool) + 1 and len(added) == 1
    assert added[0].similarity > 0 and 0 < added[0].relevance <= 1.0
    assert [c.relevance for c in joined] == sorted((c.relevance for c in joined), reverse=True)
    assert all(m.kind is not Kind.SUMMARY for m in store.query("u"))  # nothing stored
    muted_only = MemoryFilter(kinds=(Kind.EVENT,))
    assert with_summaries(pool, store, embedder.embed_query, "u", "dog", None, muted_only, 1) == [
        *sorted(pool, key=lambda c: c.relevance, reverse=True)
    ]


def test_a_pool_without_conversation_chunks_builds_nothing() -> None:
    store = MemoryStore()
    inner = WordEmbedder()
    embedder = CachedEmbedder(inner, store)
    note = Memory.new("u", "dog pottery", MemoryType.SEMANTIC, Kind.FACT, now=NOW,
                      embedding=embedder.embed(["dog pottery"])[0])  # fmt: skip
    store.write([note])
    inner.embedded.clear()
    pool = _pool(store, embedder, "dog")
    assert with_summaries(pool, store, embedder.embed_query, "u", "dog", None, ALL, 3) == pool
    assert inner.embedded == ["dog"]  # the query alone


def test_an_unchanged_session_keeps_its_summary_across_revisions() -> None:
    store, _embedder, inner = _store()
    first = summaries.indexes(store).of(store, "u", inner.embed)
    inner.embedded.clear()
    other = _chunk("A: The pottery class is on 12 June.\nB: Cool.", ("D2:1", "D2:2"), "s2")
    store.write([other.evolve(embedding=inner.embed([other.content])[0])])
    inner.embedded.clear()
    second = summaries.indexes(store).of(store, "u", inner.embed)
    assert second.revision != first.revision
    assert [m.session_id for m in second.memories] == ["s1", "s2"]
    assert second.memories[0] is first.memories[0]
    assert len(inner.embedded) == 1 and "pottery" in inner.embedded[0]  # only the new one


def test_the_engine_injects_a_summary_and_counts_only_its_quoted_turns(tmp_path: Path) -> None:
    store = MemoryStore()
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=WordEmbedder())
    said = [("A", "Hello!"), ("B", "My dog Rex chewed the pottery."), ("A", "Oh no."),
            ("B", "The kids loved the museum."), ("A", "Great.")]  # fmt: skip
    turns = [Turn(s, text, f"D1:{i}", NOW) for i, (s, text) in enumerate(said, 1)]
    engine.ingest_conversation(turns, "u", "s1", now=NOW)
    on = engine.options.update(session_summaries=2)
    gated = engine.explain("What did the dog chew?", "u", token_budget=400, options=on, now=NOW)
    found = [m for m in gated.memories if m.kind is Kind.SUMMARY]
    assert found and "D1:2" in found[0].provenance.turn_ids
    for turn in turns:  # a turn is named exactly when it is shown whole
        line = f"{turn.speaker}: {turn.text}"
        assert (turn.turn_id in found[0].provenance.turn_ids) == (line in found[0].content)
    assert all(m.kind is not Kind.SUMMARY for m in store.query("u"))
    engine.context("What did the dog chew?", "u", token_budget=400, options=on, now=NOW)
    assert all(m.kind is not Kind.SUMMARY for m in store.query("u"))  # use counting wrote none
    assert GateOptions().session_summaries == 0
