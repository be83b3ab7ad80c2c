"""The BM25 stemmer (``store/lexical._stem``): after "-ed" / "-ing" it undoubles only a
doubled consonant other than l, s and z (Porter's step 1b), so "killed" meets "kill" and
"kills" (session 21; before, any doubled letter was undoubled: "killed" → "kil", the
stemmer ``UNDOUBLED`` holding every letter and digit gives, :func:`stem_before`). Migration 011
re-stems what PostgreSQL stored with it (``tests/test_pg_restem.py``); a SQLite store's
saved index is built again."""

from __future__ import annotations

import inspect
import itertools
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engrain.store import derived_blobs, lexical, lexical_file
from engrain.store.lexical import UNDOUBLED, _stem, tokenize
from engrain.store.sqlite import SQLiteStore

from .test_store_contract import mem

#: Every character a token holds twice in a row: the earlier stemmer undoubled them all.
EVERY = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


@contextmanager
def _earlier_stemmer() -> Iterator[None]:
    """The stemmer of the trees before session 21 in this process."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lexical, "UNDOUBLED", EVERY)
        _stem.cache_clear()
        lexical.term.cache_clear()
        try:
            yield
        finally:
            _stem.cache_clear()
            lexical.term.cache_clear()


def stem_before(word: str) -> str:
    """The earlier stemmer's stem of ``word``."""
    with _earlier_stemmer():
        return _stem(word)


#: Words the earlier stemmer cut into a stem no other form of the word has, and their
#: stem now: (word, before, now).
FIXED = [
    ("killed", "kil", "kill"),
    ("killing", "kil", "kill"),
    ("passed", "pas", "pass"),
    ("passing", "pas", "pass"),
    ("filled", "fil", "fill"),
    ("called", "cal", "call"),
    ("falling", "fal", "fall"),
    ("missed", "mis", "miss"),
    ("dressed", "dres", "dress"),
    ("buzzed", "buz", "buzz"),
    ("fleeing", "fle", "flee"),
    ("tattooed", "tatto", "tattoo"),
    ("1100ed", "110", "1100"),
]
#: Words both stemmers stem alike: the ending's own double is still undone, plurals,
#: short words and numbers are as they were.
SAME = [
    ("running", "run"),
    ("planned", "plan"),
    ("stopped", "stop"),
    ("shopping", "shop"),
    ("hugged", "hug"),
    ("paints", "paint"),
    ("painted", "paint"),
    ("painting", "paint"),
    ("berries", "berry"),
    ("class", "class"),
    ("glasses", "glass"),
    ("deployed", "deploy"),
    ("kill", "kill"),
    ("kills", "kill"),
    ("passes", "pass"),
    ("added", "add"),
    ("seeing", "see"),
    ("meeting", "meet"),
    ("needed", "need"),
    ("skiing", "ski"),
    ("bed", "bed"),
    ("2023", "2023"),
]


@pytest.mark.parametrize(("word", "before", "now"), FIXED)
def test_a_double_l_s_z_vowel_or_digit_is_the_words_own(word: str, before: str, now: str) -> None:
    assert stem_before(word) == before
    assert _stem(word) == now


@pytest.mark.parametrize(("word", "stem"), SAME)
def test_other_stems_are_unchanged(word: str, stem: str) -> None:
    assert _stem(word) == stem
    assert stem_before(word) == stem


def test_a_query_for_kill_matches_a_memory_that_says_killed() -> None:
    assert set(tokenize("Who killed the lights?")) & set(tokenize("kill the lights"))
    assert tokenize("She passed the test, filled the form") == ["pass", "test", "fill", "form"]


def test_the_only_change_is_a_double_kept() -> None:
    """For words ending in "-ed" or "-ing" (or not), the two stemmers differ only where the
    earlier one undid a double the new one keeps (a letter outside ``UNDOUBLED``)."""
    stems = ["".join(p) for n in (2, 3, 4) for p in itertools.product("aelkst19", repeat=n)]
    words = [w for s in stems for w in (s, s + "ed", s + "ing")]
    now = [_stem(w) for w in words]
    with _earlier_stemmer():
        before = [_stem(w) for w in words]
    changed = [(n, b) for n, b in zip(now, before, strict=True) if n != b]
    assert ("tell", "tel") in changed  # "telled", "telling"
    for stem, earlier in changed:
        assert stem[-1] == stem[-2] and stem[-1] not in UNDOUBLED and earlier == stem[:-1]


def test_the_stemmer_is_in_the_file_a_saved_bm25_index_is_fingerprinted_by() -> None:
    """A SQLite store's saved BM25 index is used only while ``store/lexical.py``'s bytes
    are those it was built with (``lexical_file._tokenizer_digest``): the stemmer and the
    word and term rules must live there, or a change of them would reuse an old index."""
    for function in (lexical._stem, lexical.term, lexical.word, lexical.words, tokenize):
        assert inspect.getsourcefile(inspect.unwrap(function)) == lexical.__file__


def test_an_index_saved_by_the_earlier_stemmer_is_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lexical_file, "PERSIST_MIN_DOCUMENTS", 1)
    texts = ["Ada killed the build", "kill the worker", "she passed the test", "a note"]
    memories = [mem(f"m{i}", content=text) for i, text in enumerate(texts)]
    db = tmp_path / "store.db"
    with monkeypatch.context() as patch, _earlier_stemmer():  # a tree before session 21
        patch.setattr(lexical_file, "_tokenizer_digest", lambda: b"lexical.py before")
        store = SQLiteStore(db, ann_min_vectors=None)
        store.write(memories)
        assert {m.id for m, _ in store.lexical_search("alice", "kill", 5)} == {"m1"}
        store.close()  # waits for the save
    with sqlite3.connect(db) as con:
        assert derived_blobs.read(con, "alice", "bm25") is not None
    store = SQLiteStore(db, ann_min_vectors=None)
    try:
        assert {m.id for m, _ in store.lexical_search("alice", "kill", 5)} == {"m0", "m1"}
        assert {m.id for m, _ in store.lexical_search("alice", "pass", 5)} == {"m2"}
    finally:
        store.close()
