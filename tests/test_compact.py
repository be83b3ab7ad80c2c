"""Conversation chunks rendered without filler: the same evidence in fewer tokens."""

from __future__ import annotations

from engrain import Engine, Turn
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.assemble import Format, item_line, render_line, shown_content
from engrain.recall.compact import compact_chunk, compact_turn, is_filler
from engrain.tokens import count_tokens

from .conftest import NOW


def test_reactions_and_pleasantries_are_filler() -> None:
    filler = ("Wow, that's awesome!", "Thanks, Mel!", "haha", "Take care, bye!",
              "Great to hear from you.", "Hey Caroline!", "That's so cool, Mel!")  # fmt: skip
    for sentence in filler:
        assert is_filler(sentence), sentence


def test_questions_numbers_names_and_content_are_not_filler() -> None:
    content = ("What did you get?", "Thanks for the 3 books!", "It's Shia Labeouf!",
               "Wow, I adopted a dog!", "", "That was a great LGBTQ support group.")  # fmt: skip
    for sentence in content:
        assert not is_filler(sentence), sentence


def test_a_turn_keeps_its_content_sentences_in_order() -> None:
    text = "Wow, Caroline! That's awesome! I painted a sunset last week. Talk to you soon!"
    assert compact_turn(text) == "I painted a sunset last week."
    assert compact_turn("Thanks! Bye!") == "Thanks! Bye!"  # a turn is never left out


def test_a_chunk_keeps_every_line_and_all_filler_turns_whole() -> None:
    chunk = (
        "Caroline: Hey Mel! I went to a support group yesterday.\n"
        "Melanie: Wow, that's awesome!\n"
        "a line that is not a turn, Mel!"
    )
    assert compact_chunk(chunk) == (
        "Caroline: I went to a support group yesterday.\n"
        "Melanie: Wow, that's awesome!\n"
        "a line that is not a turn, Mel!"
    )


def test_nothing_changes_when_there_is_no_filler_or_only_filler() -> None:
    plain = "Caroline: I went to a support group yesterday.\nMelanie: Which one?"
    assert compact_chunk(plain) == plain
    only = "Caroline: Bye!\nMelanie: Take care!"
    assert compact_chunk(only) == only


def _memory(content: str, turn_ids: tuple[str, ...]) -> Memory:
    return Memory(
        id="m1", user_id="u", content=content, memory_type=MemoryType.EPISODIC,
        kind=Kind.EVENT, created_at=NOW, updated_at=NOW, provenance=Provenance(turn_ids=turn_ids),
    )  # fmt: skip


def test_only_conversation_memories_are_compacted_and_the_switch_turns_it_off() -> None:
    content = "Caroline: Hey Mel! I went to a support group yesterday.\nMelanie: Cool! Which?"
    turn = _memory(content, ("D1:1", "D1:2"))
    text = _memory(content, ())
    assert shown_content(turn) == "Caroline: I went to a support group yesterday.\nMelanie: Which?"
    assert shown_content(turn, compact=False) == content
    assert shown_content(text) == content
    assert render_line(turn).endswith(": " + shown_content(turn))
    for fmt in Format:
        assert count_tokens(item_line(turn, fmt, NOW.year)) < count_tokens(
            item_line(turn, fmt, NOW.year, compact=False)
        )


def test_context_renders_compact_chunks_and_counts_what_it_renders(mem_engine: Engine) -> None:
    turns = [
        Turn("Caroline", "Hey Mel! Good to see you! I adopted a cat named Pixel.", "D1:1", NOW),
        Turn("Melanie", "Wow, that's awesome! Congrats, Caroline! Is Pixel grey?", "D1:2", NOW),
        Turn("Caroline", "Thanks, Mel! Pixel sleeps on my keyboard all day.", "D1:3", NOW),
    ]  # fmt: skip
    mem_engine.ingest_conversation(turns, "u", "s1", now=NOW)
    options = mem_engine.options
    compact = mem_engine.explain("What is Caroline's cat called?", "u", token_budget=500,
                                 options=options, now=NOW)  # fmt: skip
    full = mem_engine.explain("What is Caroline's cat called?", "u", token_budget=500,
                              options=options.update(compact=False), now=NOW)  # fmt: skip
    assert compact.memories and full.memories
    assert "Pixel" in compact.text and "Wow" not in compact.text and "Wow" in full.text
    assert compact.tokens_used == count_tokens(compact.text) < full.tokens_used
    held = {t for m in compact.memories for t in m.provenance.turn_ids}
    assert held == {"D1:1", "D1:2", "D1:3"}
