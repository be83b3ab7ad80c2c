"""A question naming one speaker sees, past the best-ranked chunks, only that speaker's
lines (recall.speakers, issue 15)."""

from __future__ import annotations

from pathlib import Path

from engrain import Engine, Turn
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.assemble import Format, render
from engrain.recall.gate import GateOptions
from engrain.recall.select import Ranked
from engrain.recall.speakers import (
    SHORT_ANSWER,
    WHOLE_FIRST,
    asked_speakers,
    line_speaker,
    speaker_lines,
    with_speaker_lines,
)
from engrain.store.memory import MemoryStore
from engrain.tokens import count_tokens

from .conftest import NOW, make_settings
from .test_turns import WordEmbedder

CHUNK = (
    "Melanie: The weather was grey all week.\n"
    "Caroline: Did you go anywhere?\n"
    "Melanie: We took the kids to the museum.\n"
    "Caroline: My dog chewed the pottery."
)
IDS = ("D1:1", "D1:2", "D1:3", "D1:4")
PETS = ("dog", "cat", "parrot", "hamster")
THINGS = ("pottery", "sofa", "hat", "book")
WORDS = ("museum", "zoo", "beach", "library", "kids", *PETS, *THINGS)


def _words() -> WordEmbedder:
    """One dimension per word of :data:`WORDS`: chunks about different places and pets
    share only "kids", so none is merged into another at ingest."""
    return WordEmbedder(WORDS, punctuation="?.", model_id="speaker-words")


def _chunk(content: str = CHUNK, ids: tuple[str, ...] = IDS) -> Memory:
    return Memory.new("u", content, MemoryType.EPISODIC, Kind.EVENT, now=NOW,
                      provenance=Provenance(ids))  # fmt: skip


def _ranked(n: int) -> list[Ranked]:
    ids = [tuple(f"D{k}:{i}" for i in range(1, 5)) for k in range(n)]
    return [Ranked(_chunk(ids=i), 1.0 - k / 10, 0.5, 1.0) for k, i in enumerate(ids)]


def test_a_lines_speaker_and_who_is_asked_about() -> None:
    assert line_speaker("Melanie: We went.") == "melanie"
    assert line_speaker("no speaker here") is None
    memories = [_chunk()]
    assert asked_speakers(memories, "Where did Melanie take the kids?") == {"melanie"}
    assert asked_speakers(memories, "Where did Melanie and Caroline go?") == frozenset()
    assert asked_speakers(memories, "Where did they go?") == frozenset()
    note = Memory.new("u", "Melanie: a note", MemoryType.SEMANTIC, Kind.FACT, now=NOW)
    assert asked_speakers([note], "What did Melanie note?") == frozenset()  # not a chunk


def test_the_asked_speakers_lines_stay_with_the_question_each_answers() -> None:
    lines = CHUNK.split("\n")
    assert speaker_lines(lines, frozenset({"melanie"})) == [0, 1, 2]
    assert speaker_lines(lines, frozenset({"caroline"})) == [1, 3]
    # a chunk without a line of theirs is shown whole
    assert speaker_lines(lines, frozenset({"john"})) == [0, 1, 2, 3]


def test_only_a_short_answer_keeps_the_question_before_it() -> None:
    assert SHORT_ANSWER == 8
    words = " ".join(["word"] * SHORT_ANSWER)
    short = ["Caroline: Did you go anywhere?", f"Melanie: {words}"]
    long = ["Caroline: Did you go anywhere?", f"Melanie: {words} more"]
    asked = frozenset({"melanie"})
    assert speaker_lines(short, asked) == [0, 1]  # "Yes, twice." needs its question
    assert speaker_lines(long, asked) == [1]  # a longer line says what it is about
    assert speaker_lines(long, asked, short_answer=1_000_000) == [0, 1]  # before session 15
    assert speaker_lines(short, asked, short_answer=0) == [1]


def test_the_cut_follows_the_answer_length_asked_for() -> None:
    long_answer = (
        "Caroline: Did you go anywhere?\n"
        "Melanie: We took the kids to the museum and then to the beach for lunch."
    )
    ranked = [Ranked(_chunk(long_answer, ("D1:1", "D1:2")), 0.9 - k / 10, 0.5, 1.0)
              for k in range(WHOLE_FIRST + 1)]  # fmt: skip
    question = "Where did Melanie go?"
    assert with_speaker_lines(ranked, question)[-1].memory.provenance.turn_ids == ("D1:2",)
    every = with_speaker_lines(ranked, question, short_answer=1_000_000)[-1].memory
    assert every is ranked[-1].memory  # both lines kept: the chunk as it is
    assert with_speaker_lines(ranked, question)[-1].memory.provenance.turn_ids == ("D1:2",)


def test_chunks_past_the_best_ranked_are_cut_and_name_only_their_turns() -> None:
    ranked = _ranked(WHOLE_FIRST + 2)
    out = with_speaker_lines(ranked, "What did Caroline's dog chew?")
    assert [r.memory.content for r in out[:WHOLE_FIRST]] == [CHUNK] * WHOLE_FIRST
    for before, after in zip(ranked[WHOLE_FIRST:], out[WHOLE_FIRST:], strict=True):
        assert after.memory.content == (
            "Caroline: Did you go anywhere?\nCaroline: My dog chewed the pottery."
        )
        kept = before.memory.provenance.turn_ids
        assert after.memory.provenance.turn_ids == (kept[1], kept[3])
        assert after.memory.id == before.memory.id and after.score == before.score
        assert before.memory.content == CHUNK  # the memory itself is untouched


def test_nothing_is_cut_when_off_or_without_one_named_speaker() -> None:
    ranked = _ranked(WHOLE_FIRST + 2)
    assert with_speaker_lines(ranked, "What did Caroline's dog chew?", on=False) == ranked
    assert with_speaker_lines(ranked, "What did the dog chew?") == ranked
    assert with_speaker_lines(ranked, "What did Melanie and Caroline see?") == ranked


def test_the_gate_shows_the_named_speakers_lines_and_counts_them_exactly(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=_words())
    places, pets, things = ("museum", "zoo", "beach", "library"), PETS, THINGS
    for k, place in enumerate(places[: WHOLE_FIRST + 1]):  # one chunk past those kept whole
        said = [("Melanie", f"The {place} was lovely."),
                ("Caroline", f"Did you visit the {place}?"),
                ("Melanie", f"We took the kids to the {place}."),
                ("Caroline", f"My {pets[k]} chewed my {things[k]}.")]  # fmt: skip
        turns = [Turn(s, text, f"D{k}:{i}", NOW) for i, (s, text) in enumerate(said, start=1)]
        engine.ingest_conversation(turns, "u", f"s{k}", now=NOW)
    question = "Where did Melanie take the kids?"
    off = engine.options.update(speaker_lines=False)
    whole = engine.explain(question, "u", token_budget=2000, options=off, now=NOW)
    cut = engine.explain(question, "u", token_budget=2000, now=NOW)
    held = {t for m in whole.memories for t in m.provenance.turn_ids}
    shown = {t for m in cut.memories for t in m.provenance.turn_ids}
    assert shown < held and len(held - shown) == 1  # one chunk's "My dog chewed" line
    assert all(t.endswith(":4") for t in held - shown)  # the aside Melanie did not write
    assert cut.tokens_used == count_tokens(cut.text) < whole.tokens_used
    assert cut.text == render(list(cut.memories), Format.TAGGED, grouped=True)
    assert all("chewed" in m.content for m in store.query("u"))  # transcripts stay whole
    assert GateOptions().speaker_lines


def test_a_memory_objects_cut_is_remembered_until_the_object_changes() -> None:
    ranked = _ranked(WHOLE_FIRST + 1)
    question = "What did Caroline's dog chew?"
    first = with_speaker_lines(ranked, question)[-1].memory
    assert with_speaker_lines(ranked, question)[-1].memory is first  # the same copy
    changed = ranked[-1].memory.evolve(access_count=5)  # a new object for the same memory
    again = with_speaker_lines([*ranked[:-1], ranked[-1]._replace(memory=changed)], question)
    assert again[-1].memory is not first and again[-1].memory.access_count == 5
    assert again[-1].memory.content == first.content
    other = with_speaker_lines(ranked, "What did Melanie see?")[-1].memory
    assert other.provenance.turn_ids == tuple(ranked[-1].memory.provenance.turn_ids[:3])
