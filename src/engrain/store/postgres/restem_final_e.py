"""Migration 012: every stored posting's term as the stemmer of session 22 gives it.

Session 21's stemmer (:func:`stem_before`, kept here as it shipped, the terms every
database at 011 holds) stripped "-es" from any word in "-e" + "s" and kept the final "e" of
a bare word while "-ed" and "-ing" lost it: "note" stayed "note" while "notes", "noted",
"noting" were "not"; "create" stayed "create" while "creates", "created", "creating" were
"creat"; "times" was "tim", the name's term. The stemmer now strips "-es" only after a
hissing ending (``lexical.TAKES_ES``) and treats the word's final "e" alike in every form
(``lexical._final_e``, ``lexical._short``: Porter's steps 1b and 5a), so every form of a
word meets at one term ("note", "creat", "time").

It re-stems as 011 does (``restem.restem_from``: every content read with a server-side
cursor; for a row with a token the two stemmers make differently, each term either gives
it set to the current count or taken out; the document frequencies of the terms touched
counted again from their blocks), in the migrator's one transaction, under its advisory
lock, with ``revisions`` taken in ``EXCLUSIVE`` mode first: a second opener waits and finds
it applied, a writer waits holding nothing, readers keep the old terms until the commit, a
migrator killed halfway commits nothing and the next open runs it again. It sets terms
rather than moving them, so it is idempotent, and a database 011 just re-stemmed from
session 20's terms (011 re-stems to the current ones) is left as it is.

Most rows change here (two in three LoCoMo turns, three in four of the gating projects'
learnings, against one in twenty for 011's own fix): most texts hold an "-e" word in one
of its forms. The cost is reading every content, as for 011, and rewriting the blocks of
the terms touched (``docs/decisions.md``, session 22, h7).
"""

from __future__ import annotations

from functools import lru_cache
from itertools import pairwise
from typing import Final

from engrain.store.postgres import restem
from engrain.store.postgres.codec import Conn

#: The migration's name.
MIGRATION: Final = "012_restem_final_e"
#: The letters whose double session 21's stemmer undid after "-ed" / "-ing".
_UNDOUBLED = frozenset("bcdfghjkmnpqrtvwxy")


@lru_cache(maxsize=65_536)
def stem_before(word: str) -> str:
    """Session 21's stemmer (``lexical._stem`` as it shipped, terms stored by every tree
    from migration 011 to 012): "-es" stripped after any letter but "e" ("notes" → "not"),
    "-ed" / "-ing" stripped without giving a word its "e" back ("noted" → "not"), a bare
    word's final "e" kept ("note")."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("eed"):
        return _eed_before(word)
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if suffix == "es" and word.endswith("ees"):
            continue
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)] + keep
            if (suffix in ("ing", "ed") and len(base) > 3 and base[-1] == base[-2]
                    and base[-1] in _UNDOUBLED):  # fmt: skip
                base = base[:-1]
            if suffix == "s" and word.endswith("ss"):
                return word
            return _eed_before(base) if base.endswith("eed") else base
    return word


def _eed_before(word: str) -> str:
    """Session 21's "-eed": "-ee" when a vowel and then a consonant come before it."""
    before = word[:-3]
    vowel = [c in "aeiou" for c in before]
    for i, c in enumerate(before):
        if c == "y" and i > 0 and not vowel[i - 1]:
            vowel[i] = True
    if any(v and not w for v, w in pairwise(vowel)):
        return word[:-1]
    return word


def migrate(db: Conn) -> None:
    """Migration 012, in the migrator's transaction: re-stem every stored row's terms from
    session 21's stemmer."""
    restem.restem_from(db, stem_before)
