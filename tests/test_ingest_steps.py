"""The ingestion steps of spec section 1, one by one, with the spec's numbers."""

from __future__ import annotations

import numpy as np
import pytest

from engrain.ingest import chunk_text, chunk_turns, clean_text, dice_coefficient, route, signals
from engrain.ingest import importance as imp
from engrain.ingest.chunk import split_sentences
from engrain.ingest.dedup import find_duplicate
from engrain.model import Kind, Memory, MemoryType
from engrain.tokens import count_tokens

from .conftest import NOW

# -- cleaning ---------------------------------------------------------------------------


def test_clean_strips_normalises_and_collapses_newlines() -> None:
    raw = "  Cafe\u0301 menu\r\n\r\n\r\n\r\nsecond   paragraph \n"
    assert clean_text(raw) == "Café menu\n\nsecond   paragraph"


def test_clean_keeps_code_blocks_and_markers() -> None:
    raw = "**bold** and `code`\n\n```python\nx = 1\n\n\n\ny = 2\n```"
    cleaned = clean_text(raw)
    assert "**bold** and `code`" in cleaned
    assert "```python\nx = 1\n\ny = 2\n```" in cleaned


# -- chunking ---------------------------------------------------------------------------


def _paragraph(words: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    vocab = [
        "database",
        "server",
        "request",
        "cache",
        "token",
        "model",
        "user",
        "memory",
        "index",
        "query",
        "budget",
    ]
    sentences = []
    for _ in range(max(1, words // 10)):
        body = " ".join(rng.choice(vocab, size=9))
        sentences.append(body.capitalize() + ".")
    return " ".join(sentences)


def test_chunks_split_on_paragraphs_and_stay_within_bounds() -> None:
    text = "\n\n".join(_paragraph(80, i) for i in range(4))
    chunks = chunk_text(text)
    assert len(chunks) == 4
    assert all(50 <= count_tokens(c) <= 300 for c in chunks)


def test_long_paragraph_is_split_at_sentence_boundaries() -> None:
    text = _paragraph(700, 1)
    assert count_tokens(text) > 300
    chunks = chunk_text(text)
    assert len(chunks) >= 2
    assert all(count_tokens(c) <= 300 for c in chunks)
    assert all(c.endswith(".") for c in chunks)  # never cut mid-sentence
    assert " ".join(chunks) == text


def test_short_paragraphs_merge_with_neighbours() -> None:
    text = "First short note.\n\nSecond short note.\n\nThird short note."
    assert chunk_text(text) == [text]


def test_short_paragraph_merges_only_until_minimum() -> None:
    small = "A short note about the cache."
    big = _paragraph(120, 3)
    chunks = chunk_text(f"{small}\n\n{big}\n\n{big}")
    assert chunks[0].startswith(small) and big in chunks[0]
    assert chunks[1] == big


def test_sentence_rule_needs_space_and_capital() -> None:
    assert split_sentences("Version 2.5 is out. It works! Really? yes. Done") == [
        "Version 2.5 is out.",
        "It works!",
        "Really? yes.",
        "Done",
    ]


def test_fenced_code_block_is_never_split() -> None:
    code = "```\n" + "\n\n".join(f"line_{i} = {i}" for i in range(200)) + "\n```"
    chunks = chunk_text(f"Intro paragraph here.\n\n{code}")
    assert any(code in c for c in chunks)


def test_chunk_turns_keeps_sources() -> None:
    turns = ["Ann: hi there", "Bob: hello, how was the trip to Lisbon?", "Ann: great!"]
    pieces = chunk_turns(turns)
    assert [p.sources for p in pieces] == [(0, 1, 2)]
    long_turn = "Ann: " + _paragraph(90, 5)
    pieces = chunk_turns([long_turn, long_turn])
    assert [p.sources for p in pieces] == [(0,), (1,)]


# -- importance -------------------------------------------------------------------------


def test_importance_weights_and_threshold_are_the_spec_values() -> None:
    assert imp.NOVELTY_WEIGHT == 0.6
    assert imp.SALIENCE_WEIGHT == 0.4
    assert imp.DISCARD_BELOW == 0.3
    assert imp.importance(1.0, 0.0) == pytest.approx(0.6)
    assert imp.importance(0.0, 1.0) == pytest.approx(0.4)
    assert imp.importance(0.5, 0.5) == pytest.approx(0.5)


def test_salience_signal_weights_are_the_spec_values() -> None:
    assert imp.SALIENCE_NAMED_ENTITY == 0.3
    assert imp.SALIENCE_NUMBER_OR_DATE == 0.2
    assert imp.SALIENCE_PREFERENCE == 0.4
    assert imp.SALIENCE_TECHNICAL_TERM == 0.1


@pytest.mark.parametrize(
    ("text", "expected", "fired"),
    [
        ("ok sounds good", 0.0, []),
        ("we met with Stripe about billing", 0.3, ["named_entity"]),
        ("it took 45 minutes", 0.2, ["number_or_date"]),
        ("i prefer short answers", 0.4, ["preference"]),
        ("the snake_case names", 0.1, ["technical_term"]),
        (
            "I prefer Postgres 16 over MySQL for the user_events table",
            1.0,
            ["named_entity", "number_or_date", "preference", "technical_term"],
        ),
    ],
)
def test_salience_signals(text: str, expected: float, fired: list[str]) -> None:
    score, names = imp.salience(text)
    assert score == pytest.approx(expected)
    assert names == fired


def test_named_entity_ignores_sentence_starts_and_pronouns() -> None:
    assert not signals.has_named_entity("Today was fine. I think so.")
    assert signals.has_named_entity("yesterday I talked to Caroline")
    assert signals.has_named_entity("we deploy on AWS")


def test_novelty_is_cosine_distance_to_centroid_clamped() -> None:
    v = np.array([1.0, 0.0], dtype=np.float32)
    assert imp.novelty(v, None) == 1.0
    assert imp.novelty(v, np.array([2.0, 0.0], dtype=np.float32)) == pytest.approx(0.0)
    assert imp.novelty(v, np.array([0.0, 1.0], dtype=np.float32)) == pytest.approx(1.0)
    assert imp.novelty(v, np.array([-1.0, 0.0], dtype=np.float32)) == 1.0  # clamped from 2


# -- routing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I prefer dark mode in every editor", MemoryType.PROCEDURAL),
        ("My favorite database is Postgres", MemoryType.PROCEDURAL),
        # the seeds' own preference examples (memory-logic spec 4, ADR-002's table), verbatim
        ("Communication style: direct, technical, no preamble.", MemoryType.PROCEDURAL),
        ("User prefers Jellyfin over Plex", MemoryType.PROCEDURAL),
        ("Ada strongly prefers squash merges", MemoryType.PROCEDURAL),
        ("We prefer small pull requests", MemoryType.PROCEDURAL),
        ("The scheduler prefers idle nodes.", MemoryType.EPISODIC),  # not a person's taste
        ("The API prefers JSON bodies.", MemoryType.EPISODIC),
        ("User is a backend engineer specializing in Python and PostgreSQL.", MemoryType.SEMANTIC),
        ("Right now I'm debugging the login flow", MemoryType.WORKING),
        ("My media drive is mounted at /mnt/media.", MemoryType.SEMANTIC),
        ("Caroline works at the adoption agency.", MemoryType.SEMANTIC),
        ("We went hiking and then grabbed dinner downtown.", MemoryType.EPISODIC),
        ("What should we do about the flaky test?", MemoryType.EPISODIC),
    ],
)
def test_routing_table(text: str, expected: MemoryType) -> None:
    assert route(text) is expected


def test_hint_overrides_routing() -> None:
    assert route("I prefer tabs", MemoryType.EPISODIC) is MemoryType.EPISODIC


def test_preference_key_is_stable_and_content_based() -> None:
    assert signals.preference_key("I prefer tabs over spaces") == "tabs-spaces"
    assert signals.preference_key("I really prefer tabs over spaces!") == "tabs-spaces"
    assert signals.preference_key("User prefers tabs over spaces") == "tabs-spaces"
    # a labelled note is keyed by its label, so a new style replaces the old one
    assert signals.preference_key("Communication style: direct, no preamble.") == (
        "communication-style"
    )
    assert signals.preference_key("Code style: black, 100 columns") == "code-style"


# -- dedup ------------------------------------------------------------------------------


def test_dice_coefficient_examples() -> None:
    assert dice_coefficient("night", "nacht") == pytest.approx(
        0.25
    )  # {ni,ig,gh,ht} vs {na,ac,ch,ht}
    assert dice_coefficient("same text", "same text") == 1.0
    assert dice_coefficient("abc", "xyz") == 0.0


def _memory(content: str) -> Memory:
    return Memory(
        id=content[:8], user_id="u", content=content, memory_type=MemoryType.SEMANTIC,
        kind=Kind.FACT, created_at=NOW, updated_at=NOW,
    )  # fmt: skip


def test_find_duplicate_uses_strictly_greater_than_080() -> None:
    a = "My timezone is EST"
    near = "My timezone is EST timezone"
    assert dice_coefficient(a, near) > 0.8
    assert find_duplicate(near, [_memory(a)]) is not None
    assert find_duplicate("I use Eastern time", [_memory(a)]) is None
    # exactly at the threshold is not a duplicate
    score = dice_coefficient(a, near)
    assert find_duplicate(near, [_memory(a)], threshold=score) is None


def test_vector_prefilter_skips_far_memories_only() -> None:
    a = "My timezone is EST"
    near = "My timezone is EST timezone"
    close = _memory(a).evolve(embedding=np.array([1.0, 0.0], dtype=np.float32))
    far = _memory(a).evolve(embedding=np.array([0.0, 1.0], dtype=np.float32))
    query = np.array([1.0, 0.0], dtype=np.float32)
    assert find_duplicate(near, [close], vector=query) is close
    assert find_duplicate(near, [far], vector=query) is None  # skipped: cosine 0 < 0.5
    assert find_duplicate(near, [far]) is far  # without a vector, Dice alone decides


def test_conversation_speakers_count_as_named_entities() -> None:
    text = "Caroline: I'm thrilled to make a family for kids who need one."
    assert imp.salience(text) == (0.0, [])  # a name at a line start reads as a sentence start
    assert imp.salience(text, speakers=("Caroline",)) == (0.3, ["named_entity"])
