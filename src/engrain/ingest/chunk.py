"""Step 2, semantic chunking (spec 1.3): paragraphs, sentences above the maximum, merges
below the minimum. Never fixed-size windows.

1. Split on blank lines (``\\n\\n``); a fenced code block is one unit however many blank
   lines it holds.
2. A unit above ``max_tokens`` is split at sentence boundaries (``.``, ``!`` or ``?``, then
   whitespace, then a capital) and the sentences regrouped up to ``max_tokens``.
3. Adjacent units below ``min_tokens`` are merged with a neighbour while the result stays
   within ``max_tokens``.

A unit that is one sentence longer than ``max_tokens`` stays whole: splitting mid-sentence
would be the fixed-size chunking the spec forbids.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from engrain.tokens import count_tokens, count_with_suffix

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_FENCE = re.compile(r"^\s*(```|~~~)", re.MULTILINE)


@dataclass(frozen=True)
class Piece:
    """A chunk and the indexes of the input units (turns) it holds."""

    text: str
    sources: tuple[int, ...]
    tokens: int


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated units, keeping fenced code blocks whole."""
    units: list[str] = []
    buffer: list[str] = []
    in_fence = False
    for block in text.split("\n\n"):
        buffer.append(block)
        if len(_FENCE.findall(block)) % 2 == 1:
            in_fence = not in_fence
        if not in_fence:
            units.append("\n\n".join(buffer))
            buffer = []
    if buffer:
        units.append("\n\n".join(buffer))
    return [u for u in (u.strip() for u in units) if u]


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` by the spec's rule (terminator, space, capital)."""
    return [s for s in (p.strip() for p in _SENTENCE_END.split(text)) if s]


def _split_long(unit: str, max_tokens: int) -> list[str]:
    if count_tokens(unit) <= max_tokens or _FENCE.search(unit):
        return [unit]
    parts: list[str] = []
    current: list[str] = []
    size = 0
    for sentence in split_sentences(unit):
        n = count_tokens(sentence)
        if current and size + n > max_tokens:
            parts.append(" ".join(current))
            current, size = [], 0
        current.append(sentence)
        size += n
    if current:
        parts.append(" ".join(current))
    return parts


def joined_tokens(a: Piece, sep: str, b: Piece) -> int:
    """``count_tokens(a.text + sep + b.text)`` from the two pieces' own counts, encoding only
    ``a``'s last word, ``sep`` and ``b``'s first word ("Caroline:") again instead of the
    whole joined text (a chunk grows turn by turn, so counting it whole re-encodes it at
    every merge).

    cl100k encodes the pieces its regular expression cuts, each on its own, and a space
    after a non-space character always starts a piece that only the text after it decides
    (:func:`engrain.tokens.count_with_suffix`). With ``j`` the first such space of ``b``,
    the joined text splits there as ``b`` alone does: ``count(a + sep + b) = count(a + sep
    + b[:j]) + count(b[j:])`` and ``count(b) = count(b[:j]) + count(b[j:])``; ``a``'s side
    is ``count_with_suffix``. Without such a space ``b`` is counted whole with ``a``'s
    tail. Equal to ``count_tokens`` on random text (``tests/test_ingest_exact_shortcuts.py``)."""
    cut = _first_piece_start(b.text)
    if cut == 0:
        return count_with_suffix(a.text, a.tokens, sep + b.text)
    head = b.text[:cut]
    return count_with_suffix(a.text, a.tokens, sep + head) - count_tokens(head) + b.tokens


def _first_piece_start(text: str) -> int:
    """The index of the first space preceded by a non-whitespace character, else 0."""
    i = text.find(" ", 1)
    while i > 0 and text[i - 1].isspace():
        i = text.find(" ", i + 1)
    return max(i, 0)


def merge_small(pieces: Sequence[Piece], min_tokens: int, max_tokens: int, sep: str) -> list[Piece]:
    """Grow each piece below ``min_tokens`` with the following ones until it reaches
    ``min_tokens`` (never past ``max_tokens``); a short last piece joins its predecessor."""

    def join(a: Piece, b: Piece) -> Piece | None:
        tokens = joined_tokens(a, sep, b)
        if tokens > max_tokens:
            return None
        return Piece(a.text + sep + b.text, a.sources + b.sources, tokens)

    out: list[Piece] = []
    for piece in pieces:
        if out and out[-1].tokens < min_tokens and (merged := join(out[-1], piece)):
            out[-1] = merged
        else:
            out.append(piece)
    if len(out) > 1 and out[-1].tokens < min_tokens and (merged := join(out[-2], out[-1])):
        out[-2:] = [merged]
    return out


def chunk_text(text: str, *, max_tokens: int = 300, min_tokens: int = 50) -> list[str]:
    """Chunks of already-cleaned ``text``, each 50–300 tokens where the text allows."""
    pieces = [
        Piece(part, (i,), count_tokens(part))
        for i, unit in enumerate(_paragraphs(text))
        for part in _split_long(unit, max_tokens)
    ]
    return [p.text for p in merge_small(pieces, min_tokens, max_tokens, "\n\n")]


def chunk_turns(
    turns: Sequence[str], *, max_tokens: int = 300, min_tokens: int = 50
) -> list[Piece]:
    """Chunks of a conversation: each turn is a unit (split by sentences if too long), and
    consecutive short turns are merged. ``sources`` are the turn indexes of each chunk."""
    pieces = [
        Piece(part, (i,), count_tokens(part))
        for i, turn in enumerate(turns)
        for part in _split_long(turn, max_tokens)
    ]
    return merge_small(pieces, min_tokens, max_tokens, "\n")


def turn_lines(content: str) -> list[str]:
    """The lines of a conversation chunk's text (its turns, or the parts of a turn too long
    for one chunk), blank ones left out: the units that get a vector of their own
    (:mod:`engrain.recall.turns`)."""
    return [line for line in (part.strip() for part in content.split("\n")) if line]
