"""The BM25 stemmer (``store/lexical._stem``): after "-ed" / "-ing" it undoubles only a
doubled consonant other than l, s and z (Porter's step 1b), so "killed" meets "kill" and
"kills" (session 21; before, any doubled letter was undoubled: "killed" → "kil"). The
earlier stemmer is kept by migration 011 (``store/postgres/restem.stem_before``), which
re-stems what PostgreSQL stored with it: its table is held here too."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain.store.lexical import UNDOUBLED, _stem, tokenize
from engrain.store.postgres.restem import restemmed, row_changes, stem_before

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


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abdeiklmnopstyz19")), min_size=1, max_size=9))
def test_the_only_change_is_a_double_kept(stem: str) -> None:
    """For any word ending in "-ed" or "-ing" (or not), the two stemmers differ only where
    the earlier one undid a double the new one keeps (a letter outside ``UNDOUBLED``)."""
    for word in (stem, stem + "ed", stem + "ing"):
        now, before = _stem(word), stem_before(word)
        if now != before:
            assert now[-1] == now[-2] and now[-1] not in UNDOUBLED
            assert before == now[:-1]


def test_restemmed_names_the_old_and_new_term_of_a_changed_token() -> None:
    assert restemmed("killed") == ("kil", "kill")
    assert restemmed("killer's") is None  # "killer": no "-ed" / "-ing"
    assert restemmed("calling") == ("cal", "call")
    assert restemmed("running") is None
    assert restemmed("the") is None  # a stopword: no term either way


def test_a_rows_changes_set_each_touched_term_to_the_new_count() -> None:
    # "kil" is a word of its own here: it keeps its one posting, "killed"'s goes to "kill"
    assert row_changes("Killed it; kil, kill. Passed!", 5) == {
        "kil": (1, 5),
        "kill": (2, 5),
        "pas": None,
        "pass": (1, 5),
    }
    assert row_changes("running and planning", 2) == {}
