"""A day's conversation chunks under one header: the same evidence in fewer tokens."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from engrain import Engine, Turn
from engrain.corrections import CONFLICTS_WITH
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.assemble import (
    Format,
    block_tokens,
    day_header,
    header_tokens,
    item_line,
    render,
    render_line,
)
from engrain.recall.lines import line_cost
from engrain.recall.selection import _layout
from engrain.tokens import count_tokens

from .conftest import NOW
from .test_block_tokens import memories as any_memories
from .test_block_tokens import texts


def _chunk(content: str, days_ago: int = 0, turn: str = "D1:1", **meta: object) -> Memory:
    when = NOW - timedelta(days=days_ago)
    return Memory(
        id=f"{content[:20]}-{days_ago}-{turn}", user_id="u", content=content,
        memory_type=MemoryType.EPISODIC, kind=Kind.EVENT, created_at=when, updated_at=when,
        event_at=when, provenance=Provenance((turn,), dict(meta)),
    )  # fmt: skip


def test_a_days_chunks_share_one_header_and_other_memories_keep_their_place() -> None:
    first = _chunk("Caroline: I adopted a cat named Pixel.", 3, "D1:1")
    fact = Memory(id="f", user_id="u", content="Caroline lives in Boston.",
                  memory_type=MemoryType.SEMANTIC, kind=Kind.FACT, created_at=NOW,
                  updated_at=NOW)  # fmt: skip
    other_day = _chunk("Melanie: I ran a charity race.", 10, "D2:1")
    same_day = _chunk("Caroline: Pixel sleeps on my keyboard.", 3, "D1:5")
    block = render([first, fact, other_day, same_day], Format.TAGGED, grouped=True)
    assert block.split("\n") == [
        "<memory>",
        f"[{(NOW - timedelta(days=3)).day} Jan 2026]",
        "Caroline: I adopted a cat named Pixel.",
        "Caroline: Pixel sleeps on my keyboard.",
        "[SEMANTIC] Caroline lives in Boston.",
        f"[{(NOW - timedelta(days=10)).day} Jan 2026]",
        "Melanie: I ran a charity race.",
        "</memory>",
    ]
    flat = render([first, fact, other_day, same_day], Format.TAGGED)
    assert flat.count("[EPISODIC]") == 3 and count_tokens(block) < count_tokens(flat)


def test_only_plain_episodic_chunks_are_grouped() -> None:
    chunk = _chunk("Caroline: I adopted a cat.")
    assert day_header(chunk) == "[15 Jan 2026]"
    assert render_line(chunk, grouped=True) == "Caroline: I adopted a cat."
    # not a conversation chunk, in conflict (its line carries the note), or starting with
    # whitespace (it would merge with the header's newline): on its own line as before
    not_chunk = Memory(id="e", user_id="u", content="Deployed v2.", memory_type=MemoryType.EPISODIC,
                       kind=Kind.EVENT, created_at=NOW, updated_at=NOW)  # fmt: skip
    conflicted = _chunk("Caroline: I have two cats.", **{CONFLICTS_WITH: ["x"]})
    spaced = _chunk(" Caroline: I adopted a cat.")
    for memory in (not_chunk, conflicted, spaced):
        assert day_header(memory) is None
        assert render_line(memory, grouped=True) == render_line(memory)
    # the sections format has no day headers: grouping changes nothing there
    assert item_line(chunk, Format.SECTIONS, NOW.year, grouped=True) == item_line(
        chunk, Format.SECTIONS, NOW.year
    )


@st.composite
def day_chunks(draw: st.DrawFn) -> Memory:
    """A conversation chunk on one of three days, or any memory of any kind."""
    if draw(st.booleans()):
        return draw(any_memories())
    lines = draw(st.lists(st.tuples(st.sampled_from(["Mel", "Jo"]), texts), min_size=1,
                          max_size=3))  # fmt: skip
    days_ago, turn = draw(st.sampled_from([0, 1, 400])), f"D{draw(st.integers(0, 10**6))}"
    return _chunk("\n".join(f"{name}: {text}" for name, text in lines), days_ago, turn)


@settings(max_examples=300, deadline=None)
@given(st.lists(day_chunks(), min_size=0, max_size=8), st.booleans())
def test_grouped_block_tokens_is_the_count_of_the_rendered_block(
    selected: list[Memory], compact: bool
) -> None:
    fmt, year = Format.TAGGED, NOW.year
    text = render(selected, fmt, year=year, compact=compact, grouped=True)
    want = count_tokens(text) if text else 0
    assert block_tokens(selected, fmt, year=year, compact=compact, grouped=True) == want
    remembered = block_tokens(selected, fmt, year=year, compact=compact, grouped=True,
                              line=lambda m: line_cost(m, fmt, year, compact, True))  # fmt: skip
    assert remembered == want


def test_selection_counts_a_days_header_once() -> None:
    layout = _layout(Format.TAGGED, compact=True, grouped=True)
    assert layout.section is not None
    a, b = _chunk("Caroline: one.", 2, "D1:1"), _chunk("Melanie: two.", 2, "D1:2")
    fact = Memory(id="f", user_id="u", content="A fact.", memory_type=MemoryType.SEMANTIC,
                  kind=Kind.FACT, created_at=NOW, updated_at=NOW)  # fmt: skip
    header = day_header(a)
    assert header is not None
    assert layout.section(a) == layout.section(b) == (header, header_tokens(header))
    assert layout.section(fact) == ("", 0)
    assert _layout(Format.TAGGED).section is None  # flat: no headers to count


def test_context_groups_a_days_chunks_and_the_option_turns_it_off(mem_engine: Engine) -> None:
    day = [
        Turn("Caroline", "I adopted a cat named Pixel from the shelter on Elm St.", "D1:1", NOW),
        Turn("Melanie", "Is Pixel grey or ginger? My kids have always wanted a cat.", "D1:2", NOW),
        Turn("Caroline", "Pixel is grey and sleeps on my keyboard all day long.", "D1:3", NOW),
        Turn("Melanie", "I ran a charity race for mental health last Saturday.", "D1:4", NOW),
        Turn("Caroline", "Pixel also likes chasing the red laser pointer at night.", "D1:5", NOW),
        Turn("Melanie", "My cat Oliver hides under the bed when it thunders.", "D1:6", NOW),
    ]  # fmt: skip
    for n, turn in enumerate(day):  # one session each: a chunk each, all on one day
        mem_engine.ingest_conversation([turn], "u", f"s{n}", now=NOW)
    options = mem_engine.options
    question = "What does Caroline's cat Pixel do?"
    grouped = mem_engine.explain(question, "u", token_budget=2000, options=options, now=NOW)
    flat = mem_engine.explain(question, "u", token_budget=2000,
                              options=options.update(group_days=False), now=NOW)  # fmt: skip
    assert len(grouped.memories) == len(flat.memories) >= 2
    assert "[EPISODIC]" not in grouped.text and "[15 Jan 2026]" in grouped.text
    assert flat.text.count("[EPISODIC]") == len(flat.memories)
    assert grouped.tokens_used == count_tokens(grouped.text) < flat.tokens_used
