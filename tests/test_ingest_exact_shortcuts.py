"""Ingest's exact shortcuts (issue 18, session 12): chunking counts a merge from the pieces'
own counts, which equals cl100k's count of the joined text (so the chunks are the ones counted
whole); the code-like signal scans for what its pattern needs first, which never hides a
match."""

from __future__ import annotations

import random

import pytest

from engrain.ingest.chunk import (
    Piece,
    _first_piece_start,
    _split_long,
    chunk_turns,
    joined_tokens,
)
from engrain.tokens import count_tokens

PARTS = ["Caroline:", "Mel", " ", "  ", "\n", "\n\n", "\t", "\u00a0", "\u3000", "it's", "'ll",
         "don't", "2023", "12345", ".", "?!", "...", "--", ":)", "é", "漢字", "hello", "World",
         "snake_case", "x", "`code`", " \n", "I", "’s"]  # fmt: skip


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(PARTS) for _ in range(rng.randint(0, 12)))


def _piece(text: str) -> Piece:
    return Piece(text, (0,), count_tokens(text))


@pytest.mark.parametrize("seed", range(6))
def test_a_join_counts_what_the_joined_text_counts(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        a, b = _text(rng), _text(rng)
        for sep in ("\n", "\n\n", " ", ""):
            joined = count_tokens(a + sep + b)
            assert joined_tokens(_piece(a), sep, _piece(b)) == joined, (a, sep, b)


def test_the_first_piece_start() -> None:
    assert _first_piece_start("Caroline: hi there") == 9
    assert _first_piece_start(" lead  spaces x") == 5
    assert _first_piece_start("nospace") == 0
    assert _first_piece_start("a\n b") == 0  # the space follows whitespace


def _reference_chunks(turns: list[str], max_tokens: int, min_tokens: int) -> list[Piece]:
    """chunk_turns as it was: every merge counted whole."""
    out: list[Piece] = []
    parts = [(i, part) for i, turn in enumerate(turns) for part in _split_long(turn, max_tokens)]
    for i, part in parts:
        piece = Piece(part, (i,), count_tokens(part))
        if out and out[-1].tokens < min_tokens:
            joined = out[-1].text + "\n" + part
            if count_tokens(joined) <= max_tokens:
                out[-1] = Piece(joined, (*out[-1].sources, i), count_tokens(joined))
                continue
        out.append(piece)
    if len(out) > 1 and out[-1].tokens < min_tokens:
        joined = out[-2].text + "\n" + out[-1].text
        if count_tokens(joined) <= max_tokens:
            out[-2:] = [Piece(joined, out[-2].sources + out[-1].sources, count_tokens(joined))]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_conversation_chunks_are_the_ones_counted_whole(seed: int) -> None:
    rng = random.Random(seed)
    names = ["Caroline", "Melanie", "Jon"]
    words = ["I", "went", "to", "the", "lake", "yesterday!", "It's", "2023.", "Wow", "so",
             "fun", "—", "café", "don't", "you", "think?", "LGBTQ", "support", "group",
             "\u00a0ok"]  # fmt: skip
    turns = [f"{rng.choice(names)}: " + " ".join(rng.choice(words)
                                                for _ in range(rng.randint(1, 40)))
             for _ in range(60)]  # fmt: skip
    for low, high in ((50, 300), (20, 60)):
        assert chunk_turns(turns, max_tokens=high, min_tokens=low) == _reference_chunks(
            turns, high, low
        )


def test_the_code_like_prefilter_never_hides_a_match() -> None:
    from engrain.ingest.signals import _CODE_LIKE, _CODE_LIKE_NEEDS

    rng = random.Random(3)
    pieces = ["run", "`ls`", "my_var", "camelCase", "foo.bar(", "abc123", "main.py", "x.md",
              "--flag", "-", ".", "(", "_", "`", "A", "b", "7", " ", "\n", "Hello", "py",
              "é"]  # fmt: skip
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        if _CODE_LIKE.search(text) is not None:
            assert _CODE_LIKE_NEEDS.search(text) is not None, text
