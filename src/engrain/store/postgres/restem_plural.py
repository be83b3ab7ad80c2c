"""Migration 013: every stored posting's term as the stemmer of session 23 gives it.

Session 22's stemmer (:func:`stem_before`, kept here as it shipped, the terms every
database at 012 holds) took "-ies" to "-y" only after three letters or more and "-ied" not
at all, so "studied" was "studi" while "study", "studies", "studying" were "study";
"tried", "tries" were "tri" while "try" stayed "try"; and "movie" was "movi" while
"movies" was "movy". It also stripped the "s" of "-us", so "status" met "statue" ("statu")
while "focus" ("focu") missed "focused" and "focuses" ("focus"). The stemmer now takes
"-ies", "-ied" and "-ie" to the word's "-y" after two letters or more, to "-ie" after one
(``lexical._ie``: Porter2's step 1a), and keeps the "s" of "-us" as of "-ss"
(``lexical.KEEPS_S``).

It re-stems as 011 and 012 do (``restem.restem_from``: every content read with a
server-side cursor; for a row with a token the two stemmers make differently, each term
either gives it set to the current count or taken out; the document frequencies of the
terms touched counted again from their blocks), in the migrator's one transaction, under
its advisory lock, with ``revisions`` taken in ``EXCLUSIVE`` mode first: a second opener
waits and finds it applied, a writer waits holding nothing, readers keep the old terms
until the commit, a migrator killed halfway commits nothing and the next open runs it
again. It sets terms rather than moving them, so it is idempotent, and a database 011 or
012 just re-stemmed (to the current terms) is left as it is.

Few rows change (a word in "-ied", "-ie", "-us" or a short "-ies": about one LoCoMo turn
in eight; ``docs/decisions.md``, session 23, h1): the cost is reading every content, as for
011 and 012.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import pairwise
from typing import Final

from engrain.store.postgres import restem
from engrain.store.postgres.codec import Conn

#: The migration's name.
MIGRATION: Final = "013_restem_plural"
_UNDOUBLED = frozenset("bcdfghjkmnpqrtvwxy")
_TAKES_ES = ("sses", "xes", "zzes", "ches", "shes", "ies")


@lru_cache(maxsize=65_536)
def stem_before(word: str) -> str:
    """Session 22's stemmer (``lexical._stem`` as it shipped, terms stored by every tree
    from migration 012 to 013): "-ies" → "-y" after three letters or more, "-ied" → "-i"
    ("studied" → "studi"), a bare "-ie" losing its "e" ("movie" → "movi"), the "s" of
    "-us" stripped ("status" → "statu")."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("eed"):
        return _eed(word)
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if suffix == "es" and not word.endswith(_TAKES_ES):
            continue
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith("ss"):
                return word
            base = word[: -len(suffix)] + keep
            if base.endswith("eed"):
                return _eed(base)
            if suffix in ("ing", "ed"):
                if len(base) > 3 and base[-1] == base[-2] and base[-1] in _UNDOUBLED:
                    return base[:-1]
                if _short(base):
                    return base + "e"
            return _final_e(base)
    return _final_e(word)


def _final_e(word: str) -> str:
    if len(word) < 4 or word[-1] != "e" or word[-2] == "e":
        return word
    stem = word[:-1]
    return stem if _measure(stem) > 0 and not _short(stem) else word


def _vowels(stem: str) -> list[bool]:
    vowel = [c in "aeiou" and not (c == "u" and stem[i - 1 : i] == "q")
             for i, c in enumerate(stem)]  # fmt: skip
    for i, c in enumerate(stem):
        if c == "y" and i > 0 and not vowel[i - 1]:
            vowel[i] = True
    return vowel


def _measure(stem: str) -> int:
    return sum(v and not w for v, w in pairwise(_vowels(stem)))


def _short(stem: str) -> bool:
    if len(stem) < 3 or stem[-1] in "wxy":
        return False
    v = _vowels(stem)
    return not v[-3] and v[-2] and not v[-1] and _measure(stem) == 1


def _eed(word: str) -> str:
    return word[:-1] if _measure(word[:-3]) > 0 else word


def migrate(db: Conn) -> None:
    """Migration 013, in the migrator's transaction: re-stem every stored row's terms from
    session 22's stemmer."""
    restem.restem_from(db, stem_before)
