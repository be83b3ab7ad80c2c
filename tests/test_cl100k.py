"""engrain's compact cl100k (``engrain/cl100k.py``, issue 18): the same ids and counts as
tiktoken's encoding, without tiktoken in the process."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from functools import lru_cache
from pathlib import Path

import pytest
import tiktoken

from engrain import cl100k, tokens

LOCOMO = Path(__file__).resolve().parents[1] / "../shared/data/locomo/locomo_dev.json"
SNIPPETS = ["the", " cat", "'s", "'S", "'LL", "x'RE", "'Ve", "123456", " \n\n", "  ", "\r\n",
            " \n", "\t", "éà", "日本語", "\u00a0", "\u3000", "\x1c", "\x85", "ſ", "ß", "ﬅ",
            "don't", "WE'LL", "🎉", "<|endoftext|>", "  \n \x0b"]  # fmt: skip


@lru_cache(maxsize=1)
def reference() -> tiktoken.Encoding:
    """tiktoken's own encoding of the same file."""
    return tiktoken.get_encoding(tokens.ENCODING_NAME)


def expected(text: str) -> list[int]:
    return reference().encode(text, disallowed_special=())


@lru_cache(maxsize=1)
def encoder() -> cl100k.Encoder:
    return cl100k.Encoder(cl100k.load_tables())


def random_texts(
    count: int, alphabet: list[str], seed: int, snippets: list[str] = SNIPPETS
) -> list[str]:
    rng = random.Random(seed)
    return [
        "".join(
            rng.choice(alphabet) if rng.random() < 0.5 else rng.choice(snippets)
            for _ in range(rng.randrange(1, 60))
        )
        for _ in range(count)
    ]


def test_ids_and_counts_equal_tiktokens_on_real_text() -> None:
    if not LOCOMO.is_file():
        pytest.skip("LoCoMo's dev file is not here")
    texts: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(LOCOMO.read_text(encoding="utf-8")))
    texts = random.Random(5).sample(texts, 4_000)
    for text in texts:
        ids = expected(text)
        assert encoder().encode(text) == ids, text
        assert encoder().count(text) == len(ids), text


def test_ids_and_counts_equal_tiktokens_on_random_text_of_every_plane() -> None:
    rng = random.Random(1)
    points = [rng.randrange(0x80, 0x40000) for _ in range(6_000)]
    alphabet = [chr(c) for c in range(0x20, 0x250)] + [
        chr(c) for c in points if not 0xD800 <= c < 0xE000
    ]
    for text in random_texts(3_000, alphabet, seed=2):
        ids = expected(text)
        assert encoder().encode(text) == ids, ascii(text)
        assert encoder().count(text) == len(ids), ascii(text)


def test_ascii_text_through_the_ascii_expression_gives_tiktokens_ids() -> None:
    snippets = [s for s in SNIPPETS if s.isascii()]
    for text in random_texts(3_000, [chr(c) for c in range(128)], seed=3, snippets=snippets):
        assert text.isascii()
        ids = expected(text)
        assert encoder().encode(text) == ids, ascii(text)
        assert encoder().count(text) == len(ids), ascii(text)


def test_code_points_of_newer_unicode_split_as_tiktoken_splits_them() -> None:
    # A letter before "'s" ends its own piece ("'s" is a piece); a code point tiktoken's
    # tables do not know joins the apostrophe's punctuation piece instead.
    points = {c for a, b in cl100k.NEWER for c in range(a - 2, b + 3)}
    for point in sorted(points):
        texts = [chr(point) + "'s"]
        if point % 5 == 0:  # digits and letters around it too, on a sample
            texts += ["x" + chr(point) * 4 + "1", "7" + chr(point) + "7"]
        for text in texts:
            assert encoder().encode(text) == expected(text), hex(point)


def test_lone_surrogates_are_replaced_as_tiktoken_replaces_them() -> None:
    for text in ("\ud800 lone", "a\udfffb 'll", "\ud83d\ude00 joined"):
        assert encoder().encode(text) == expected(text)
        assert encoder().count(text) == len(expected(text))


def test_decode_gives_back_the_text() -> None:
    for text in ("héllo 🎉 wörld", "<|endoftext|> as text", ""):
        assert encoder().decode(encoder().encode(text)) == text
    broken = encoder().encode("🎉")[:1]
    assert encoder().decode(broken) == reference().decode(broken)


def test_ranks_stay_exact_when_tokens_share_a_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    # every token of one length shares its hash: the bytes decide
    monkeypatch.setattr(cl100k, "hash", len, raising=False)
    tables = cl100k.Tables([b"a", b"b", b"ab", b"ba", b"abc"])
    assert [tables.rank(t) for t in (b"a", b"b", b"ab", b"ba", b"abc")] == [0, 1, 2, 3, 4]
    assert tables.rank(b"bb") > 4 and tables.rank(b"") > 4
    assert tables.token(3) == b"ba" and len(tables) == 5


def test_the_piece_cache_starts_afresh_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cl100k, "PIECES_MAX", 8)
    fresh = cl100k.Encoder(encoder().tables)
    for text in random_texts(300, [chr(c) for c in range(0x20, 0x3000, 7)], seed=4):
        assert fresh.count(text) == len(expected(text))
        assert len(fresh._counts) <= 8


def test_threads_sharing_an_encoder_count_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cl100k, "PIECES_MAX", 64)  # clears race with reads
    shared = cl100k.Encoder(encoder().tables)
    texts = random_texts(400, [chr(c) for c in range(0x20, 0x800, 3)], seed=6)
    want = [len(expected(t)) for t in texts]
    got: list[list[int]] = []

    def run() -> None:
        got.append([shared.count(t) for t in texts])

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [want] * 6


def test_the_tables_are_small() -> None:
    assert len(encoder().tables) == 100_256
    assert encoder().tables.nbytes < 3 * 2**20  # tiktoken's core: 21.6 MB


def test_counting_loads_no_tiktoken_and_ascii_text_no_regex_module() -> None:
    code = (
        "import sys, engrain\n"
        "from engrain.tokens import count_tokens, encode, decode\n"
        "assert count_tokens('hello world') == 2 and decode(encode('a b')) == 'a b'\n"
        "print('tiktoken' in sys.modules, 'regex' in sys.modules)\n"
        "count_tokens('héllo')\n"
        "print('regex' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False", "True"]


def test_the_public_counts_are_the_compact_encoders() -> None:
    text = "Counted by engrain: ünïcode, code_like_names and 12345 digits."
    assert tokens.count_tokens(text) == len(expected(text)) == len(tokens.encode(text))
    assert tokens.encode(text) == expected(text)
    assert tokens.decode(tokens.encode(text)) == text


def unicode_split(text: str) -> list[str]:
    """The pieces of ``text`` by the ``regex`` module's expression alone (before the spans)."""
    return list(cl100k._unicode_pieces().findall(text))


def test_text_outside_ascii_splits_as_the_unicode_expression_splits_it() -> None:
    # only the spans around characters outside ASCII go through the regex module; the cut
    # must never fall where a piece could continue: after whitespace of any kind (a space,
    # a no-break space, \x1c, \x85), inside a contraction, a number, a punctuation run
    snippets = [*SNIPPETS, " ", " é", "é ", "a é", "’", "—", " —", "\u00a0 ", " \u00a0",
                "\x1c ", "'s ", "9 ", ". ", "—.", "é's"]  # fmt: skip
    rng = random.Random(4)
    points = [rng.randrange(0x80, 0x110000) for _ in range(3_000)]
    alphabet = [chr(c) for c in range(0x20, 0x250)] + [
        chr(c) for c in points if not 0xD800 <= c < 0xE000
    ]
    split = encoder()._split
    texts = [t for t in random_texts(6_000, alphabet, seed=5, snippets=snippets)
             if not t.isascii()]  # fmt: skip
    assert len(texts) > 5_000
    for text in texts:
        assert split(text) == unicode_split(text), ascii(text)


def test_every_code_point_splits_as_the_unicode_expression_splits_it() -> None:
    # every code point once, after and before the characters a cut looks at
    points = [c for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000]
    around = [" ", "  ", "a ", " a", "'s ", "1 ", "\u00a0 ", "\n ", "x", "", ". "]
    split = encoder()._split
    for start in range(0, len(points), 2_000):
        block = points[start : start + 2_000]
        text = "".join(chr(c) + around[i % len(around)] for i, c in enumerate(block))
        assert split(text) == unicode_split(text), hex(block[0])


def test_the_regex_module_splits_only_the_spans_around_text_outside_ascii() -> None:
    seen: list[str] = []

    def recorded(text: str) -> list[str]:
        seen.append(text)
        return unicode_split(text)

    ascii_split = cl100k.re.compile(cl100k.ASCII_PATTERN, cl100k.re.ASCII).findall
    text = "Tomás recommended the book Piranesi, in the café\u00a0 next door’s window."
    pieces = cl100k._mixed_split(text, ascii_split, recorded)
    assert pieces == unicode_split(text) and "".join(pieces) == text
    # each span runs from a space after a non-space character to the next such space; the
    # no-break space before "next" makes the span of "café" reach the next cut
    assert seen == ["Tomás", " café\u00a0 next", " door’s"]
