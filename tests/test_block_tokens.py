"""A block's tokens from its lines' own counts equal ``count_tokens`` of the rendered block.

``context()`` counts the block it returns from the counts selection already made
(``assemble.block_tokens``, ``tokens.count_with_suffix``) instead of encoding it again; the
numbers must be exactly the tokenizer's, for any text a memory can hold, in both formats.
"""

from __future__ import annotations

import gc
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from engrain import Kind, Memory, MemoryType
from engrain.corrections import CONFLICTS_WITH
from engrain.model import Provenance
from engrain.recall.assemble import Format, block_tokens, item_line, render
from engrain.recall.lines import line_cost, line_floor, line_tokens
from engrain.tokens import count_tokens, count_with_suffix, min_tokens

from .conftest import NOW

#: Characters where cl100k's pieces split or merge: whitespace of every kind (including
#: what Python calls space and the tokenizer does not, \x1c), newlines, digits, punctuation
#: runs, contractions, letters of other scripts, emoji and the special-token spelling.
PIECES = [
    "a", "b", "Z", "é", "ß", "漢", "😀", "0", "12", "345", ".", ",", "!", "?", "'", "’", '"',
    "-", "(", ")", "[", "]", "#", ":", "<", ">", "/", "'s", "'ll", "'ve", "'re", "n't", " ",
    "  ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\x1c", "\x85", "\x0b",
    " word", " Word", "word", "<|endoftext|>", "</memory>", "[FACT]", "- ",
]  # fmt: skip
texts = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(texts, st.sampled_from(["\n", "\n\n", "\n</memory>", " ", "s", "!", "\r\n", "x y"]))
def test_count_with_suffix_is_the_count_of_the_joined_text(text: str, suffix: str) -> None:
    assert count_with_suffix(text, count_tokens(text), suffix) == count_tokens(text + suffix)


def test_count_with_suffix_on_a_line_ending_in_punctuation() -> None:
    # ".\n" is one piece (a punctuation run takes the newlines after it): the count with
    # the newline is not the line's count plus one
    line = "[SEMANTIC] The deploy froze on Friday."
    assert count_tokens(line + "\n") != count_tokens(line) + count_tokens("\n")
    assert count_with_suffix(line, count_tokens(line), "\n") == count_tokens(line + "\n")


KINDS = [Kind.INVARIANT, Kind.PATTERN, Kind.DECISION, Kind.PREFERENCE, Kind.FACT, Kind.EVENT,
         Kind.CONTEXT, Kind.GOLDEN_PATH]  # fmt: skip


@st.composite
def memories(draw: st.DrawFn) -> Memory:
    """A memory of any kind and content, some of them conversation chunks (rendered
    compacted), events, older than this year or flagged as conflicting."""
    kind = draw(st.sampled_from(KINDS))
    chunk = draw(st.booleans())
    content = draw(texts.filter(str.strip)) if not chunk else "\n".join(
        f"{name}: {text}"
        for name, text in draw(st.lists(st.tuples(st.sampled_from(["Mel", "Jo"]), texts),
                                        min_size=1, max_size=3))
    )  # fmt: skip
    meta = {CONFLICTS_WITH: ["other"]} if draw(st.booleans()) else {}
    created = NOW - timedelta(days=draw(st.integers(0, 800)))
    return Memory(
        id=f"m{draw(st.integers(0, 10**9))}", user_id="u", content=content,
        memory_type=kind.default_memory_type, kind=kind, created_at=created, updated_at=created,
        event_at=created if kind is Kind.EVENT else None,
        provenance=Provenance(("t1",) if chunk else (), meta),
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(memories(), min_size=0, max_size=8), st.sampled_from(list(Format)),
       st.booleans())  # fmt: skip
def test_block_tokens_is_the_count_of_the_rendered_block(
    selected: list[Memory], fmt: Format, compact: bool
) -> None:
    year = NOW.year
    text = render(selected, fmt, year=year, compact=compact)
    want = count_tokens(text) if text else 0
    assert block_tokens(selected, fmt, year=year, compact=compact) == want
    remembered = block_tokens(selected, fmt, year=year, compact=compact,
                              line=lambda m: line_cost(m, fmt, year, compact))  # fmt: skip
    assert remembered == want


@settings(max_examples=300, deadline=None)
@given(st.lists(memories(), min_size=0, max_size=8), st.sampled_from(list(Format)),
       st.booleans(), st.booleans())  # fmt: skip
def test_a_block_of_remembered_lines_is_the_rendered_block(
    selected: list[Memory], fmt: Format, compact: bool, grouped: bool
) -> None:
    """The gate renders its block from the lines selection remembered (``_fit``): the same
    text, byte for byte, as rendering every memory again, grouped or not."""
    year = NOW.year
    text = render(selected, fmt, year=year, compact=compact, grouped=grouped)
    line = lambda m: line_cost(m, fmt, year, compact, grouped)[0]  # noqa: E731
    assert render(selected, fmt, year=year, compact=compact, grouped=grouped, line=line) == text


def test_block_tokens_of_sections_with_several_headings() -> None:
    def memory(kind: Kind, content: str) -> Memory:
        return Memory(id=content, user_id="u", content=content, memory_type=MemoryType.SEMANTIC,
                      kind=kind, created_at=NOW, updated_at=NOW)  # fmt: skip

    selected = [
        memory(Kind.FACT, "Billing runs on Postgres 15."),
        memory(Kind.INVARIANT, "Never log card numbers!"),
        memory(Kind.FACT, "The API gateway is Envoy  "),
        memory(Kind.DECISION, "We moved to Kafka in March 2025; see ADR-12."),
    ]
    for fmt in Format:
        text = render(selected, fmt, year=NOW.year)
        assert block_tokens(selected, fmt, year=NOW.year) == count_tokens(text)


def test_line_cost_follows_the_memory_object() -> None:
    first = Memory(id="m", user_id="u", content="Deploys go out on Tuesdays.",
                   memory_type=MemoryType.SEMANTIC, kind=Kind.FACT, created_at=NOW,
                   updated_at=NOW)  # fmt: skip
    line = item_line(first, Format.TAGGED, NOW.year)
    assert line_cost(first, Format.TAGGED, NOW.year) == (line, count_tokens(line))
    # the same id with new content (a new object: memories are immutable) is costed anew,
    # also when the old object is gone and its id() may be reused
    del first
    gc.collect()
    edited = Memory(id="m", user_id="u", content="Deploys go out on Tuesdays and Thursdays.",
                    memory_type=MemoryType.SEMANTIC, kind=Kind.FACT, created_at=NOW,
                    updated_at=NOW)  # fmt: skip
    line = item_line(edited, Format.TAGGED, NOW.year)
    assert line_cost(edited, Format.TAGGED, NOW.year) == (line, count_tokens(line))
    sections = item_line(edited, Format.SECTIONS, NOW.year)
    assert line_cost(edited, Format.SECTIONS, NOW.year) == (sections, count_tokens(sections))


@settings(max_examples=400, deadline=None)
@given(texts)
def test_min_tokens_never_exceeds_the_count(text: str) -> None:
    assert min_tokens(text) <= count_tokens(text)


def test_min_tokens_is_the_word_count_of_ordinary_text() -> None:
    line = "[SEMANTIC] Priya moved the billing service to Kafka because retries are simpler."
    assert min_tokens(line) == 12 <= count_tokens(line)
    assert min_tokens("a.\x1c.b") == 0  # Python splits at \x1c, the tokenizer does not


@settings(max_examples=100, deadline=None)
@given(memories(), st.sampled_from(list(Format)), st.booleans())
def test_line_floor_bounds_the_line_cost(memory: Memory, fmt: Format, remembered: bool) -> None:
    if remembered:
        line_cost(memory, fmt, NOW.year)
    line = item_line(memory, fmt, NOW.year)
    assert line_floor(memory, fmt, NOW.year) <= count_tokens(line)
    # a line only bounded so far is counted exactly when a selection needs its cost
    assert line_cost(memory, fmt, NOW.year) == (line, count_tokens(line))
    assert line_floor(memory, fmt, NOW.year) == line_tokens(memory, fmt, NOW.year)
