"""A memory's own tags named in the message (``GateOptions.named_tag`` and
``unnamed_tag``, issue 12; both 0, off, by default).

A learning's ``domains`` are the words its writer chose for what it is about ("gx",
"plugins", "mllp", "latency"): the embedding and BM25 read its content, never its tags, so a
message that names a tag ("Write a GX expectation suite …") matches the memory only as far
as its content happens to repeat the word. Of the gating evaluation's tune misses, 29 %
carry a tag the message names against 3 % of the lines rightly left out (``bench/
gating_signals.py``). The tag is compared as the lexical index compares words (lowercase,
light stem, stopwords dropped): every word of a tag ("change-management", "sql-style") must
be among the message's terms.

Measured, not adopted (docs/classification.md, "Session 28 … (h6)"): +0.10 for a tag named,
−0.02 for a learning whose tags are not when the message names another's, chosen leaving
one project out, finds 2 labels more on the tune halves for fewer tokens, and the same 660
of 728 on the held halves, one fewer on quill.

Pure functions over the call's own text and each candidate's own tags: nothing is read
from the store; the only thing kept between calls is a tag's terms (:func:`tag_terms`, a
function of the tag's text alone).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from engrain.store.lexical import tokenize

#: What separates a tag's words: "change-management", "sql_style", "site profiles".
_TAG_SPLIT = re.compile(r"[-_/\s]+")


def message_terms(text: str) -> frozenset[str]:
    """The message's terms as the lexical index counts them."""
    return frozenset(tokenize(text))


@lru_cache(maxsize=4096)
def tag_terms(tag: str) -> tuple[str, ...]:
    """A tag's terms (empty for a tag of stopwords only, which no message can name)."""
    return tuple(tokenize(_TAG_SPLIT.sub(" ", tag)))


def names_a_tag(tags: Iterable[str], terms: frozenset[str]) -> bool:
    """Whether a message of ``terms`` names one of ``tags``: all of a tag's terms in it."""
    for tag in tags:
        words = tag_terms(tag)
        if words and all(word in terms for word in words):
            return True
    return False
