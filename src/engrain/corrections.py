"""Corrections and conflicts between memories.

- A **correction** ("Actually, my timezone is Europe/Bratislava, not America/New_York")
  supersedes the memory it corrects: the old one is kept, linked (``superseded_by``) and
  never injected again; the correction records what it corrects. Without an explicit
  target, the nearest active memory at least ``correction_similarity`` close is it.
- Two active memories that are about the same thing (cosine at least
  ``conflict_similarity``) but **disagree** are flagged for review: each lists the other
  in ``provenance.metadata["conflicts_with"]``. They are then injected together, each with
  its date and a review note, so the model sees both and can ask. Disagreeing means: they
  have the **same subject** and differ in a value said of it: different numbers, one
  negates what the other says, different names (capitalised words, acronyms) where the
  rest is the same, opposite feelings about one thing, or two exclusive choices.
- The subject is what comes before the main verb ("Service 3 | runs on port 8033"), found
  with a small lexicon of auxiliaries and verbs rather than a parser. Identifiers in it
  must match: "Service 3" and "Service 5", "Alice" and "Bob", "the staging database" and
  "the production database" are different subjects, so their values cannot disagree. A
  text without a recognisable subject is compared whole, as if the subjects matched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engrain.model import Kind, Memory, MemoryFields, Provenance, ids_in

CONFLICTS_WITH = "conflicts_with"
CORRECTS = "corrects"
#: Kinds whose statements can contradict one another (events and summaries just happened).
CONFLICT_KINDS = frozenset(
    {Kind.FACT, Kind.PREFERENCE, Kind.DECISION, Kind.INVARIANT, Kind.PATTERN, Kind.CONTEXT}
)

_NEGATION = re.compile(
    r"\b(?:not|never|no longer|don'?t|doesn'?t|isn'?t|aren'?t|won'?t|can'?t|cannot|"
    r"didn'?t|stopped|quit)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_WORD = re.compile(r"[A-Za-z][\w'/.-]*")
#: Words, numbers, and the separators that end a label ("Deadline: March 3").
_TOKEN = re.compile(
    r"(?P<num>\d+(?:[.,:/]\d+)*)|(?P<word>[A-Za-z][\w'/.-]*)|(?P<sep>:\s|\s[=\u2013\u2014-]\s)"
)

_SEP = ":"  # a separator's token: no word normalises to it
_PRONOUNS = frozenset({"i", "we", "you", "he", "she", "they", "it"})
_DETERMINERS = frozenset(
    {"the", "a", "an", "my", "our", "your", "his", "her", "their", "its", "this", "that",
     "these", "those"}
)  # fmt: skip
#: Words that end a subject whatever follows: auxiliaries, modals and negations.
_AUXILIARIES = frozenset(
    {"is", "are", "was", "were", "am", "be", "been", "has", "have", "had", "do", "does", "did",
     "will", "would", "can", "could", "should", "must", "may", "might", "shall", "not", "never",
     "no", "don't", "doesn't", "didn't", "isn't", "aren't", "wasn't", "won't", "can't",
     "cannot"}
)  # fmt: skip
_IRREGULAR = {
    "run": ("ran",), "go": ("went", "goes"), "take": ("took",), "make": ("made",),
    "get": ("got",), "write": ("wrote",), "speak": ("spoke",), "drink": ("drank",),
    "eat": ("ate",), "begin": ("began",), "meet": ("met",), "leave": ("left",),
    "choose": ("chose",), "keep": ("kept",), "build": ("built",), "sell": ("sold",),
    "buy": ("bought",), "pay": ("paid",), "teach": ("taught",), "lead": ("led",),
    "drive": ("drove",), "ride": ("rode",), "wear": ("wore",), "sleep": ("slept",),
    "break": ("broke",), "come": ("came",), "know": ("knew",), "find": ("found",),
    "hold": ("held",), "send": ("sent",), "spend": ("spent",), "think": ("thought",),
}  # fmt: skip
#: Verbs that state the facts users tell an assistant; a subject ends where one is used as
#: a verb (not after a determiner, not before another verb: "the build", "tests run").
_VERB_STEMS = (
    "add", "allow", "assign", "attend", "avoid", "begin", "belong", "block", "break", "build",
    "buy", "call", "change", "choose", "close", "come", "compile", "connect", "contain",
    "cost", "decide", "default", "delete", "depend", "deploy", "detest", "dislike", "drink",
    "drive", "eat", "end", "enjoy", "expire", "expose", "fail", "favor", "favour", "find",
    "finish", "fix", "get", "go", "hate", "hold", "host", "include", "join", "keep", "know",
    "last", "launch", "lead", "leave", "like", "limit", "listen", "live", "loathe", "love",
    "make", "manage", "meet", "move", "need", "open", "own", "pay", "play", "point", "prefer",
    "publish", "quit", "read", "release", "remove", "replace", "report", "require", "return",
    "ride", "run", "sell", "send", "serve", "ship", "sleep", "speak", "spend", "start", "stay",
    "stop", "store", "study", "support", "switch", "take", "teach", "test", "think", "travel",
    "use", "visit", "wake", "walk", "want", "watch", "wear", "weigh", "work", "write",
)  # fmt: skip
#: Verbs whose objects add up ("I speak French", "I speak German"): a second object is
#: more of the same, not a replacement; and adverbs that say so.
_ADDITIVE_STEMS = ("enjoy", "know", "like", "love", "own", "play", "read", "speak", "visit",
                   "watch")  # fmt: skip
_ADDITIVE_ADVERBS = frozenset({"also", "too"})
_POSITIVE_STEMS = ("enjoy", "favor", "favour", "like", "love", "prefer")
_NEGATIVE_STEMS = ("avoid", "detest", "dislike", "hate", "loathe")
#: Choices that hold one value at a time: preferring spaces replaces preferring tabs.
_EXCLUSIVE = frozenset({"prefer", "prefers", "preferred", "favorite", "favourite"})
#: Words that do not tell one subject from another.
_FILLER = _DETERMINERS | frozenset(
    {"in", "on", "at", "of", "for", "with", "to", "from", "by", "and", "or", "actually",
     "now", "currently", "still", "also", "just", "really", "always", "usually", "already",
     "today", "recently", "then", "so", "well", "anyway"}
)  # fmt: skip
#: Leading labels that announce a statement rather than name its subject ("Update: ...").
_LABELS = frozenset({"correction", "update", "note", "fyi", "reminder", "edit", "ps"})
_PREPOSITIONS = frozenset({"in", "on", "at", "to", "for", "with", "from", "by"})


def _forms(stem: str) -> set[str]:
    """The stem's present and past forms (``-ing`` forms are left out: they are nouns and
    adjectives more often than main verbs)."""
    if stem.endswith("e"):
        past = stem + "d"
    elif re.search(r"[^aeiou][aeiou][bdgmnpt]$", stem) and stem not in {"visit", "limit"}:
        past = stem + stem[-1] + "ed"  # stop → stopped, prefer → preferred
    elif re.search(r"[^aeiou]y$", stem):
        past = stem[:-1] + "ied"
    else:
        past = stem + "ed"
    if re.search(r"(?:s|sh|ch|x|z|o)$", stem):
        third = stem + "es"
    elif re.search(r"[^aeiou]y$", stem):
        third = stem[:-1] + "ies"
    else:
        third = stem + "s"
    return {stem, third, past, *_IRREGULAR.get(stem, ())}


def _all_forms(stems: Iterable[str]) -> frozenset[str]:
    return frozenset(form for stem in stems for form in _forms(stem))


_VERBS = _all_forms(_VERB_STEMS)
_ADDITIVE = _all_forms(_ADDITIVE_STEMS)
_POSITIVE = _all_forms(_POSITIVE_STEMS) | {"favorite", "favourite"}
_NEGATIVE = _all_forms(_NEGATIVE_STEMS)


@dataclass(frozen=True)
class _Statement:
    """A text split where its main verb starts: the subject, what is said of it."""

    subject: tuple[str, ...] | None  # lowercased tokens; None: no subject found
    predicate: str

    @property
    def known(self) -> bool:
        return self.subject is not None

    def subject_words(self) -> frozenset[str]:
        return frozenset(w for w in self.subject or () if w not in _FILLER)

    def identifiers(self) -> frozenset[str]:
        """The numbers and single capital letters that tell one thing from another
        ("Service 3", "cluster B")."""
        return frozenset(w for w in self.subject or () if _is_identifier(w))

    def head(self) -> str | None:
        """The subject's head noun: its last word that is not an identifier or filler."""
        words = [w for w in self.subject or () if w not in _FILLER and not _is_identifier(w)]
        return words[-1] if words else None


def _is_letter_id(word: str) -> bool:
    """A single capital letter after the text's start: "cluster A", not the article (nor
    the pronoun "I")."""
    return len(word) == 1 and word.isupper() and word != "I"


def _is_identifier(token: str) -> bool:
    return token[0].isdigit() or _is_letter_id(token)


def _normal(word: str) -> str:
    word = word.lower().rstrip(".-/'")
    return word[:-2] if word.endswith("'s") and word not in {"it's", "he's", "she's"} else word


def _split(text: str) -> _Statement:
    """The subject is what comes before the main verb ("Service 3 | runs on port 8033"), a
    lone pronoun ("I | prefer tabs") or a label ("Deadline: | March 3"). Without a verb, the
    text up to its first preposition; failing that, the subject is unknown."""
    matches = list(_TOKEN.finditer(text))
    tokens = [
        _SEP if m["sep"] else m[0] if i and _is_letter_id(m[0]) else _normal(m[0])
        for i, m in enumerate(matches)
    ]
    first = 0
    if len(tokens) > 1 and tokens[0] in _LABELS and tokens[1] == _SEP:
        first = 2  # "Update: the API runs on ..." is about the API
    if first < len(tokens) and tokens[first].split("'")[0] in _PRONOUNS:
        return _Statement((tokens[first].split("'")[0],), text[matches[first].end() :])
    for i in range(first + 1, len(tokens)):
        word, before = tokens[i], tokens[i - 1]
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        is_verb = word in _AUXILIARIES or (
            word in _VERBS and before not in _DETERMINERS
            and after not in _VERBS and after not in _AUXILIARIES
        )  # fmt: skip
        if is_verb or word == _SEP:
            return _Statement(tuple(tokens[first:i]), text[matches[i].start() :])
    for i in range(first + 1, len(tokens)):
        if tokens[i] in _PREPOSITIONS:
            return _Statement(tuple(tokens[first:i]), text[matches[i].start() :])
    return _Statement(None, text)


def _same_subject(a: _Statement, b: _Statement) -> bool:
    """Whether two statements are about the same thing: identifiers in the subject (the 3
    of "Service 3") are equal, the head nouns are equal, and one subject's words contain the
    other's ("the database" may be "the staging database"; "Alice" is not "Alice's team").
    An unknown subject cannot be told apart, so it counts as the same."""
    if not (a.known and b.known):
        return True
    if a.identifiers() != b.identifiers() or a.head() != b.head():
        return False
    wa, wb = a.subject_words(), b.subject_words()
    return wa <= wb or wb <= wa


def same_subject(a: str, b: str) -> bool:
    """Whether two texts are about the same subject, as :func:`disagreement` decides it.
    Near-identical texts about different subjects ("Service 3 runs on port 8033", "Service 5
    runs on port 8055") are two facts: neither a duplicate nor a conflict."""
    return _same_subject(_split(a), _split(b))


def _names(text: str, *, opens: bool = True) -> set[str]:
    """Capitalised words (not the text's first when it ``opens`` a sentence) and acronyms."""
    words = _WORD.findall(text)
    skip = 1 if opens else 0
    return {
        w for i, w in enumerate(words)
        if (i >= skip and w[0].isupper()) or (w.isupper() and len(w) > 1)
    }  # fmt: skip


def _words(text: str) -> set[str]:
    return {_normal(w) for w in _WORD.findall(text)}


def _preference(a: _Statement, b: _Statement, text_a: str, text_b: str) -> str | None:
    """Opposite feelings about the same thing, or two different exclusive choices."""
    pa, pb = _words(a.predicate), _words(b.predicate)
    objects_a = pa - _FILLER - _POSITIVE - _NEGATIVE - _AUXILIARIES
    objects_b = pb - _FILLER - _POSITIVE - _NEGATIVE - _AUXILIARIES
    pos_a, neg_a = bool(pa & _POSITIVE), bool(pa & _NEGATIVE)
    pos_b, neg_b = bool(pb & _POSITIVE), bool(pb & _NEGATIVE)
    if ((pos_a and neg_b) or (neg_a and pos_b)) and objects_a & objects_b:
        return "opposite preferences"
    exclusive = _words(text_a) & _EXCLUSIVE and _words(text_b) & _EXCLUSIVE
    if exclusive and (objects_a - objects_b) and (objects_b - objects_a):
        return "different preferences"
    return None


def disagreement(a: str, b: str) -> str | None:
    """Why two texts about the same thing disagree, or ``None`` if they do not appear to.

    They disagree only if they have the same subject (see :func:`_same_subject`) and what
    they say of it differs in a value: a number, a negation, a name in place of another
    (unless the verb adds objects up, as "speak" or "also like" do), or a preference."""
    sa, sb = _split(a), _split(b)
    if not _same_subject(sa, sb):
        return None
    na, nb = set(_NUMBER.findall(sa.predicate)), set(_NUMBER.findall(sb.predicate))
    if na and nb and na != nb:
        return "different numbers"
    if bool(_NEGATION.search(a)) != bool(_NEGATION.search(b)):
        return "one negates the other"
    whole = not (sa.known and sb.known)
    names_a = _names(sa.predicate, opens=whole)
    names_b = _names(sb.predicate, opens=whole)
    differing = _words(a) ^ _words(b)
    additive = (_words(sa.predicate) | _words(sb.predicate)) & (_ADDITIVE | _ADDITIVE_ADVERBS)
    if (names_a - names_b) and (names_b - names_a) and len(differing) <= 6 and not additive:
        return "different names"
    return _preference(sa, sb, a, b)


def conflicts_of(memory: MemoryFields) -> tuple[str, ...]:
    """The ids this memory is flagged as conflicting with."""
    return ids_in(memory.provenance.metadata, CONFLICTS_WITH)


def with_meta(memory: Memory, **changes: Any) -> Memory:
    """The memory with provenance metadata keys set (``None`` removes a key)."""
    meta = {k: v for k, v in {**memory.provenance.metadata, **changes}.items() if v is not None}
    return memory.evolve(provenance=Provenance(memory.provenance.turn_ids, meta))


def flag(memory: Memory, others: Iterable[str]) -> Memory:
    """The memory flagged as conflicting with ``others`` too."""
    ids = list(dict.fromkeys([*conflicts_of(memory), *others]))
    return with_meta(memory, **{CONFLICTS_WITH: ids})


def unflag(memory: Memory, others: Iterable[str]) -> Memory:
    """The memory no longer flagged against ``others`` (a resolved or deleted partner)."""
    gone = set(others)
    ids = [i for i in conflicts_of(memory) if i not in gone]
    return with_meta(memory, **{CONFLICTS_WITH: ids or None})
