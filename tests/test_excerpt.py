"""A conversation chunk rendered as its best lines (recall.excerpt, issue 15; off by default)."""

from __future__ import annotations

from pathlib import Path

from engrain import Engine, Turn
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.assemble import Format, render
from engrain.recall.excerpt import ExcerptRule, chunk_lines, excerpt, kept_lines, with_excerpts
from engrain.recall.gate import GateOptions
from engrain.recall.select import Ranked
from engrain.store.memory import MemoryStore
from engrain.tokens import count_tokens

from .conftest import NOW, make_settings
from .test_turns import WordEmbedder

CHUNK = (
    "A: The weather was grey all week.\n"
    "B: Did you go anywhere?\n"
    "A: We took the kids to the museum.\n"
    "B: My dog chewed the pottery."
)
IDS = ("D1:1", "D1:2", "D1:3", "D1:4")


def _chunk(content: str = CHUNK, ids: tuple[str, ...] = IDS, **meta: object) -> Memory:
    return Memory.new("u", content, MemoryType.EPISODIC, Kind.EVENT, now=NOW,
                      provenance=Provenance(ids, dict(meta)))  # fmt: skip


def test_lines_are_matched_one_to_one_with_turn_ids_or_not_at_all() -> None:
    assert chunk_lines(_chunk()) == CHUNK.split("\n")
    assert chunk_lines(_chunk(ids=IDS[:3])) is None  # a turn split over two lines
    assert chunk_lines(_chunk(history=[{"content": "x"}])) is None  # a merge added turns
    note = Memory.new("u", "one\ntwo", MemoryType.SEMANTIC, Kind.FACT, now=NOW)
    assert chunk_lines(note) is None


def test_a_kept_line_brings_the_question_it_answers() -> None:
    lines = CHUNK.split("\n")
    rule = ExcerptRule(lines=1)
    assert kept_lines([0.1, 0.0, 0.9, 0.2], lines, rule) == [1, 2]
    assert kept_lines([0.1, 0.9, 0.0, 0.2], lines, rule) == [1, 2]  # the answer it asks for
    assert kept_lines([0.1, 0.0, 0.9, 0.2], lines, ExcerptRule(lines=1, neighbours=False)) == [2]
    # a second line far below the best is dropped by the margin
    assert kept_lines([0.9, 0.0, 0.2, 0.8], lines, ExcerptRule(lines=2, neighbours=False)) == [
        0,
        3,
    ]
    two = ExcerptRule(lines=2, neighbours=False, margin=0.05)
    assert kept_lines([0.9, 0.0, 0.2, 0.8], lines, two) == [0]


def test_an_excerpt_names_only_the_turns_it_shows() -> None:
    memory = _chunk()
    cut = excerpt(memory, [1, 2])
    assert cut.id == memory.id
    assert cut.content == "B: Did you go anywhere?\nA: We took the kids to the museum."
    assert cut.provenance.turn_ids == ("D1:2", "D1:3")
    assert memory.content == CHUNK  # the memory itself is untouched


def test_off_or_short_chunks_are_left_whole() -> None:
    ranked = [Ranked(_chunk(), 1.0, 0.5, 1.0)]
    assert with_excerpts(ranked, "museum kids", ExcerptRule()) == ranked  # lines 0: off
    short = [Ranked(_chunk("A: museum.\nB: kids.", IDS[:2]), 1.0, 0.5, 1.0)]
    assert with_excerpts(short, "museum", ExcerptRule(lines=2)) == short


def test_lexical_match_picks_the_line_when_there_are_no_vectors() -> None:
    ranked = [Ranked(_chunk(), 1.0, 0.5, 1.0)]
    out = with_excerpts(ranked, "Who went to the museum with the kids?", ExcerptRule(lines=1))
    assert out[0].memory.provenance.turn_ids == ("D1:2", "D1:3")
    best_first = ExcerptRule(lines=1, whole_first=1)
    assert with_excerpts(ranked, "museum kids", best_first)[0].memory.content == CHUNK


def test_the_block_shows_the_excerpt_and_counts_it_exactly(tmp_path: Path) -> None:
    store = MemoryStore()
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=WordEmbedder())
    said = [line.split(": ", 1) for line in CHUNK.split("\n")]
    turns = [Turn(s, text, tid, NOW) for (s, text), tid in zip(said, IDS, strict=True)]
    engine.ingest_conversation(turns, "u", "s1", now=NOW)
    question = "Who took the kids to the museum?"
    on = engine.options.update(excerpt=ExcerptRule(lines=1, neighbours=False))
    whole = engine.explain(question, "u", token_budget=400, now=NOW)
    cut = engine.explain(question, "u", token_budget=400, options=on, now=NOW)
    held = {t for m in whole.memories for t in m.provenance.turn_ids}
    shown = {t for m in cut.memories for t in m.provenance.turn_ids}
    assert "D1:3" in shown and shown < held
    assert "museum" in cut.text and "pottery" not in cut.text
    assert cut.tokens_used == count_tokens(cut.text) < whole.tokens_used
    assert cut.text == render([m for m in cut.memories], Format.TAGGED, grouped=True)
    stored = {m.content for m in store.query("u")}
    assert any("pottery" in c for c in stored)  # the transcript stays whole
    assert GateOptions().excerpt.lines == 0
