"""The BM25 stemmer (``store/lexical._stem``): after "-ed" / "-ing" it undoubles only a
doubled consonant other than l, s and z (Porter's step 1b), so "killed" meets "kill" and
"kills" (session 21; before, any doubled letter was undoubled: "killed" → "kil"); it takes
"-eed" as Porter's step 1b does ("agreed" → "agree", "speed" kept whole, not "spe") and
strips only the "s" of "-ees" ("agrees" → "agree", not "agre"). :func:`stem_before` is the
stemmer every tree before session 21 had. Migration 011 re-stems what PostgreSQL stored
with it (``tests/test_pg_restem.py``); a SQLite store's saved index is built again."""

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


def stem_before(word: str) -> str:
    """The stemmer of the trees before session 21 (``lexical._stem`` as it shipped in
    session 20), copied here to test the migration's own copy against."""
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)] + keep
            if suffix in ("ing", "ed") and len(base) > 3 and base[-1] == base[-2]:
                base = base[:-1]
            if suffix == "s" and word.endswith("ss"):
                return word
            return base
    return word


@contextmanager
def _earlier_stemmer() -> Iterator[None]:
    """The stemmer of the trees before session 21 in this process."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lexical, "_stem", stem_before)
        lexical.term.cache_clear()
        try:
            yield
        finally:
            lexical.term.cache_clear()


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
#: Words in "-eed" / "-ees" and their other forms, (word, before, now): the earlier stemmer
#: stripped "-ed" / "-es" after the "e" ("agreed" → "agre", "speed" → "spe" while "speeds"
#: → "speed"); now "-eed" → "-ee" when a vowel and a consonant come before it (Porter's
#: m > 0), else it is kept, and "-ees" loses only its "s". Each family meets at one stem.
EED = [
    ("agreed", "agre", "agree"),
    ("agrees", "agre", "agree"),
    ("agreeing", "agre", "agree"),
    ("disagreed", "disagre", "disagree"),
    ("guaranteed", "guarante", "guarantee"),
    ("guarantees", "guarante", "guarantee"),
    ("refereed", "refere", "referee"),
    ("speed", "spe", "speed"),
    ("bleed", "ble", "bleed"),
    ("breed", "bre", "breed"),
    ("greed", "gre", "greed"),
    ("freed", "fre", "freed"),  # m = 0: kept whole, as Porter does ("free" stays apart)
    ("frees", "fre", "free"),
    ("freeing", "fre", "free"),
    ("proceed", "proce", "procee"),
    ("proceeds", "proceed", "procee"),
    ("proceeded", "proceed", "procee"),
    ("proceeding", "proceed", "procee"),
    ("exceed", "exce", "excee"),
    ("exceeds", "exceed", "excee"),
    ("exceeded", "exceed", "excee"),
    ("exceeding", "exceed", "excee"),
    ("succeed", "succe", "succee"),
    ("succeeded", "succeed", "succee"),
    ("indeed", "inde", "indee"),
    ("employees", "employe", "employee"),
    ("committees", "committe", "committee"),
    ("trees", "tre", "tree"),
    ("degrees", "degre", "degree"),
]
#: "-eed" / "-ees" words both stemmers stem alike: one syllable before "eed" (m = 0) or
#: too short for an ending.
EED_SAME = [
    ("need", "need"),
    ("needs", "need"),
    ("needed", "need"),
    ("needing", "need"),
    ("feed", "feed"),
    ("feeds", "feed"),
    ("feeding", "feed"),
    ("seed", "seed"),
    ("seeds", "seed"),
    ("seeded", "seed"),
    ("speeds", "speed"),
    ("speeding", "speed"),
    ("deed", "deed"),
    ("weed", "weed"),
    ("agree", "agree"),
    ("free", "free"),
    ("sees", "see"),
    ("fees", "fee"),
    ("tree", "tree"),
    ("employee", "employee"),
]


@pytest.mark.parametrize(("word", "before", "now"), FIXED)
def test_a_double_l_s_z_vowel_or_digit_is_the_words_own(word: str, before: str, now: str) -> None:
    assert stem_before(word) == before
    assert _stem(word) == now


@pytest.mark.parametrize(("word", "stem"), SAME)
def test_other_stems_are_unchanged(word: str, stem: str) -> None:
    assert _stem(word) == stem
    assert stem_before(word) == stem


@pytest.mark.parametrize(("word", "before", "now"), EED)
def test_eed_and_ees_keep_the_e_of_the_word(word: str, before: str, now: str) -> None:
    assert stem_before(word) == before
    assert _stem(word) == now


@pytest.mark.parametrize(("word", "stem"), EED_SAME)
def test_one_syllable_eed_words_are_unchanged(word: str, stem: str) -> None:
    assert _stem(word) == stem
    assert stem_before(word) == stem


def test_porters_measure_reads_y_after_a_consonant_as_a_vowel() -> None:
    assert _stem("slyteed") == "slytee"  # "slyt": y after l is a vowel, then t: m = 1
    assert _stem("yteed") == "yteed"  # "yt": y at the start is a consonant: m = 0
    assert _stem("flyeed") == "flyeed"  # "fly": a vowel, no consonant after it: m = 0


def test_a_query_for_kill_matches_a_memory_that_says_killed() -> None:
    assert set(tokenize("Who killed the lights?")) & set(tokenize("kill the lights"))
    assert tokenize("She passed the test, filled the form") == ["pass", "test", "fill", "form"]


def test_the_only_changes_are_a_double_kept_and_an_e_kept() -> None:
    """For words ending in "-ed", "-ing", "-s" (or not), the two stemmers differ only where the
    earlier one undid a double the new one keeps (a letter outside ``UNDOUBLED``), or cut
    "-eed" / "-ees" after its "e": "-eed" now keeps "ee" ("ed" or only "d" goes), "-ees"
    loses only its "s"."""
    stems = ["".join(p) for n in (2, 3, 4) for p in itertools.product("aelkst19", repeat=n)]
    words = [w for s in stems for w in (s, s + "ed", s + "ing", s + "s")]
    changed = [(w, _stem(w), stem_before(w)) for w in words if _stem(w) != stem_before(w)]
    assert ("telled", "tell", "tel") in changed
    assert ("keeed", "keeed", "kee") in changed  # "ke" + "eed": m = 0, kept whole
    assert ("taleed", "talee", "tale") in changed  # "tal" + "eed": m = 1, "-ee"
    assert ("lees", "lee", "lee") not in changed  # too short for "-es": "s" before too
    assert ("tlees", "tlee", "tle") in changed
    for word, stem, earlier in changed:
        if word.endswith("eed"):
            # the earlier one may have undone the "ee" as well ("aaeeed" → "aae")
            assert stem in (word, word[:-1]) and earlier in (word[:-2], word[:-3])
        elif word.endswith("ees"):
            assert stem == word[:-1] and earlier == word[:-2]
        else:
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
    texts += ["we agreed on it", "they agree"]
    memories = [mem(f"m{i}", content=text) for i, text in enumerate(texts)]
    db = tmp_path / "store.db"
    with monkeypatch.context() as patch, _earlier_stemmer():  # a tree before session 21
        patch.setattr(lexical_file, "_tokenizer_digest", lambda: b"lexical.py before")
        store = SQLiteStore(db, ann_min_vectors=None)
        store.write(memories)
        assert {m.id for m, _ in store.lexical_search("alice", "kill", 5)} == {"m1"}
        assert {m.id for m, _ in store.lexical_search("alice", "agree", 5)} == {"m5"}
        store.close()  # waits for the save
    with sqlite3.connect(db) as con:
        assert derived_blobs.read(con, "alice", "bm25") is not None
    store = SQLiteStore(db, ann_min_vectors=None)
    try:
        assert {m.id for m, _ in store.lexical_search("alice", "kill", 5)} == {"m0", "m1"}
        assert {m.id for m, _ in store.lexical_search("alice", "pass", 5)} == {"m2"}
        assert {m.id for m, _ in store.lexical_search("alice", "agree", 5)} == {"m4", "m5"}
    finally:
        store.close()
