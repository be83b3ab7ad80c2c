"""Short messages with no content word (relevance gating, step 1): trivial by reason.

The seed's trivial messages are "greetings, thanks, short affirmations". What makes them
trivial is not their exact words but that they name nothing the memory could answer: no
thing, no action, no question. :mod:`engrain.recall.trivial` knows the acknowledgements;
this module adds the rest of a social reply without a content word:

* an **apology or reassurance** (:data:`APOLOGY`: "my bad", "sorry!", "no worries at all");
* **filler** (:data:`FILLER`: "hmm", "well", "anyway") and a **vocative** ("thanks guys");
* the **function words** that hold such a reply together (:data:`FUNCTION_WORDS`, a closed
  vocabulary: articles, pronouns, prepositions, conjunctions, degree adverbs — "at all",
  "for that", "so much") — never a question word, a modal or an auxiliary, nor a negation
  ("thanks, still not working" reports a problem);
* a **presence check** ("you around?", "still there?", "anyone here?", "hello?"): the one
  question that asks nothing of memory, made only of an addressee, a word of presence
  (:data:`PRESENCE`) or of being free (:data:`AVAILABLE`) and a greeting, or of a call alone
  (:data:`CALLS`: "hello?", "ping"); without its question mark too when it names its
  addressee ("are you around"), and with a moment asked for (:data:`ASKS_FOR_TIME`: "hey,
  got a sec?"). "you around? the
  DAG is failing" has content words and stays a message; "is it back?" asks about a thing
  ("it"), not a person;
* a **time of day** (:data:`TIME`: "that's all for today, thanks") and a **reassurance
  negated** ("don't worry about it", "not a problem": a negation right before an apology
  word, which it turns into reassurance, not into a report).

The other way round, :func:`follows_up` says when a short reply asks for work on the turn
before, so that nothing reads it as an acknowledgement: a verb with its object ("run it",
"lol ok, fix that") or, with no social word, a word that points back at that turn or asks
for more of it (:data:`FOLLOW_UP`: "same thing", "try again", "next", "this one too",
"shorter"; "lol same" and "nice, that's way cleaner" react).

A message qualifies when it is short (the caller's test), every word is in these closed
classes, at least one word is social (an acknowledgement, a greeting, thanks, laughter or an
apology: function words and words of presence alone, "me too", say nothing either way and are
left to the rules) and no word holds a digit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

#: Apologies and reassurance: the reply to one, or one ("my bad", "no worries at all").
APOLOGY = frozenset(
    ["sorry", "sry", "soz", "apologies", "apology", "apologize", "apologise", "pardon",
     "worries", "worry", "problem", "problemo", "prob", "probs", "bad", "mb", "oops",
     "whoops", "excuse", "forgive", "nevermind", "nvm", "mistake",
     # the user's own slip seen ("oh duh, my bad", "d'oh"), as "oops" is
     "duh", "doh", "d'oh",
     # in the other languages whose thanks the rules know ("désolé", "perdón")
     "désolé", "désolée", "desolé", "desole", "perdón", "perdon", "disculpa", "disculpe",
     "entschuldigung", "scusa", "scusi", "desculpa", "desculpe", "przepraszam",
     "извини", "простите", "すみません", "ごめん", "ごめんなさい", "对不起", "抱歉",
     # reassurance that nothing is owed ("no rush", "no hurry")
     "rush", "hurry"]
)  # fmt: skip
#: Hesitation, filler and vocatives: they carry no request ("hmm ok", "thanks guys").
FILLER = frozenset(
    ["um", "umm", "uh", "uhh", "er", "erm", "hmm", "hm", "mm", "mhm", "mmm", "well", "anyway",
     "anyways", "oh", "ah", "eh", "meh", "welp", "guys", "team", "folks", "friend", "pal",
     "bro", "fam", "y'all", "yall", "peeps", "people",
     # hedges that open a reaction ("honestly that's a relief", "ngl that's neat")
     "honestly", "ngl", "tbh"]
)  # fmt: skip
#: Words that say a person is present ("you around?", "still there?", "back online").
PRESENCE = frozenset(["around", "there", "here", "online", "awake", "alive", "back", "home"])
#: Times of day and of the week: when the user comes or goes, not what they ask about.
TIME = frozenset(["today", "tonight", "tomorrow", "week", "weekend"])
#: Negations that turn the apology word right after them (an article between) into
#: reassurance ("don't worry", "not a problem", "never a bother").
NEGATIONS = frozenset(["don't", "dont", "not", "never"])
#: Words that point back at the previous turn or ask for more of it, or for it changed:
#: sameness and otherness, repetition and sequence, addition, and the comparatives that
#: ask an answer to be redone ("shorter", "simpler"). "better" is left out: "much better"
#: reports a fix.
FOLLOW_UP = frozenset(
    ["same", "other", "another", "again", "next", "too", "also", "else", "more", "less",
     "instead", "rest", "both", "either", "previous", "last", "shorter", "longer", "simpler",
     "faster", "slower", "smaller", "bigger", "cleaner", "clearer", "briefer", "terser"]
)  # fmt: skip
#: The user as the subject of a verb: "i get it", "we fixed that" report, "run it" asks.
SUBJECTS = frozenset(["i", "we", "i'll", "we'll", "i'd", "will", "gonna"])
#: Auxiliaries and forms of "be": they take no object ("that was it" reports, asks nothing).
AUXILIARIES = frozenset(
    ["is", "are", "was", "were", "be", "been", "am", "does", "did", "has", "have", "had",
     "can", "could", "will", "would", "should", "may", "might", "must"]
)  # fmt: skip
#: Pronouns that take a verb's object ("run it", "fix that").
OBJECTS = frozenset(["it", "that", "this", "them", "those", "these"])
#: The closed classes that hold a reply together and name nothing: articles and
#: determiners, pronouns, prepositions, conjunctions, degree adverbs. No question word
#: (what, why, how…), no modal or auxiliary (can, is, did…), no negation (not, never,
#: n't): each turns a reply into a question or a report.
FUNCTION_WORDS = frozenset(
    [
        # articles, determiners, quantifiers
        "a", "an", "the", "this", "that", "these", "those", "all", "both", "each", "every",
        "some", "any", "such", "much", "many", "lot", "lots", "more", "most",
        # pronouns
        "i", "me", "my", "mine", "myself", "you", "your", "yours", "u", "ur", "ya", "we",
        "us", "our", "it", "its", "they", "them", "their", "he", "him", "his", "she", "her",
        "one", "everyone", "everybody", "anyone", "anybody", "someone", "somebody",
        # prepositions
        "at", "for", "to", "of", "in", "on", "with", "about", "from", "by", "up", "out",
        "over", "after", "as",
        # conjunctions
        "and", "or", "but", "so", "then", "too", "also", "though", "either",
        # degree and time adverbs
        "very", "really", "quite", "pretty", "totally", "completely", "absolutely", "just",
        "again", "now", "already", "even", "indeed", "ever", "once", "truly", "seriously",
    ]
)  # fmt: skip
#: The words a presence check may hold besides a greeting: its addressee, the verb "be"
#: and the words of presence ("are you still there?", "anyone around?").
PRESENCE_CHECK = frozenset(
    ["you", "u", "ya", "anyone", "anybody", "someone", "somebody", "everyone", "y'all",
     "yall", "are", "r", "all", "still", "guys", "team", "folks", *PRESENCE]
)  # fmt: skip
#: Greetings that call someone: asked alone ("hello?", "hey??"), they ask whether anyone is
#: there, a presence check; "ping" is chat's call, with or without its question mark.
CALLS = frozenset(["hi", "hello", "hey", "heya", "hiya", "yo", "howdy", "ping"])
#: Whether the one addressed is free to talk ("hey, you free?", "are you busy"): a presence
#: check that asks for time, not for memory; the request comes next.
AVAILABLE = frozenset(["free", "available", "busy"])
#: The one addressed, for a presence check without its question mark: "are you around" is
#: the same question as "are you around?", chat drops the mark; "still there" alone may
#: report a bug ("the banner is still there"), so without the mark the addressee is needed.
ADDRESSEES = frozenset(
    ["you", "u", "ya", "anyone", "anybody", "someone", "somebody", "everyone", "y'all", "yall"]
)  # fmt: skip
#: Asking for a moment of the one addressed ("hey, got a sec?", "have you got a minute"):
#: time, not memory, is asked; removed before the words are judged, so "got a minute to
#: look at the deploy?" keeps its request.
ASKS_FOR_TIME = re.compile(
    r"\b(?:(?:have |do )?(?:you |u |ya )?(?:got|have|has)|can i (?:have|get|borrow)) "
    r"(?:a |one )?(?:quick )?(?:sec|second|minute|min|moment)s?(?: for me)?(?=\W*$)"
)
#: Greetings that may open a presence check ("hey, you around?", "morning, anyone here?").
GREETINGS = frozenset(
    ["hi", "hello", "hey", "heya", "hiya", "yo", "howdy", "gm", "good", "morning", "afternoon",
     "evening", "ok", "okay", "so"]
)  # fmt: skip


def asks_nothing(text: str, words: Sequence[str], social: Callable[[str], bool]) -> bool:
    """Whether ``text`` (short, lower-cased ``words``) holds no content word: a reply made
    of the closed classes above and ``social`` words (acknowledgements, greetings, thanks,
    laughter: ``social`` says whether a word is one), with a social word or an apology; or,
    with a question mark, a presence check."""
    if not words or any(ch.isdigit() for w in words for ch in w):
        return False
    if "?" in text:
        return _checks_presence(words)
    if _checks_presence(words) and not _names_no_one(words):
        return True  # "are you around", "ping": the question without its mark
    anchored = False
    for i, word in enumerate(words):
        if (social(word) and word not in FUNCTION_WORDS) or word in APOLOGY:
            anchored = True
        elif word in NEGATIONS and reassures(words[i + 1 : i + 3]):
            continue
        elif word not in FUNCTION_WORDS and word not in FILLER and word not in PRESENCE | TIME:
            return False
    return anchored


def follows_up(words: Sequence[str], social: Callable[[str], bool]) -> bool:
    """Whether a short reply (lower-cased ``words``) asks for work on the turn before: a
    word that is neither social nor a function word, not an auxiliary (:data:`AUXILIARIES`)
    nor a report (``-ed``, ``-ing``),
    followed by an object pronoun (:data:`OBJECTS`: "run it"), or "do" followed by
    anything ("now do prod"), and not preceded by the user
    as its subject (:data:`SUBJECTS`: "i get it"); or a word of :data:`FOLLOW_UP` and no
    social word ("same thing", "try again")."""
    for i in range(1, len(words)):
        verb, subject = words[i - 1], words[i - 2] if i > 1 else ""
        acted_on = words[i] in OBJECTS and _names_an_action(verb, social)
        if (acted_on or verb == "do") and subject not in SUBJECTS:
            return True  # "run it", "now do prod"
    if FOLLOW_UP.isdisjoint(words):
        return False
    return not any(social(w) and w not in FUNCTION_WORDS | FOLLOW_UP for w in words)


def _names_an_action(word: str, social: Callable[[str], bool]) -> bool:
    return not (
        social(word) or word in FUNCTION_WORDS or word in FILLER or word in APOLOGY
        or word in AUXILIARIES or word.endswith(("ed", "ing"))
        or any(ch.isdigit() for ch in word)
    )  # fmt: skip


def reassures(after: Sequence[str]) -> bool:
    """Whether the words after a negation are an apology word, an article between."""
    rest = list(after[1:]) if after and after[0] in ("a", "an") else list(after)
    return bool(rest) and rest[0] in APOLOGY


def _checks_presence(words: Sequence[str]) -> bool:
    """A presence check: only :data:`GREETINGS`, filler and :data:`PRESENCE_CHECK` words,
    one of them a word of presence (:data:`PRESENCE`), of being free (:data:`AVAILABLE`) or a
    call (:data:`CALLS`: "hello?" asks whether anyone is there, as "ok?" does not)."""
    present = available = False
    for word in words:
        if word in PRESENCE or word in CALLS:
            present = True
        elif word in AVAILABLE:
            available = True
        elif word not in PRESENCE_CHECK and word not in FILLER and word not in GREETINGS:
            return False
    # free or busy is said of a person ("you free?"), alone of a thing ("free?": of charge)
    return present or (available and not _names_no_one(words))


def _names_no_one(words: Sequence[str]) -> bool:
    """Whether ``words`` name no one: no addressee (:data:`ADDRESSEES`) and no call."""
    return ADDRESSEES.isdisjoint(words) and CALLS.isdisjoint(words)
