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
* a **presence check** ("you around?", "still there?", "anyone here?"): the one question
  that asks nothing of memory, made only of an addressee, a word of presence
  (:data:`PRESENCE`) and a greeting. "you around? the DAG is failing" has content words
  and stays a message; "is it back?" asks about a thing ("it"), not a person.

A message qualifies when it is short (the caller's test), every word is in these closed
classes, at least one word is social (an acknowledgement, a greeting, thanks, laughter or an
apology: function words and words of presence alone, "me too", say nothing either way and are
left to the rules) and no word holds a digit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: Apologies and reassurance: the reply to one, or one ("my bad", "no worries at all").
APOLOGY = frozenset(
    ["sorry", "sry", "soz", "apologies", "apology", "apologize", "apologise", "pardon",
     "worries", "worry", "problem", "problemo", "prob", "probs", "bad", "mb", "oops",
     "whoops", "excuse", "forgive", "nevermind", "nvm"]
)  # fmt: skip
#: Hesitation, filler and vocatives: they carry no request ("hmm ok", "thanks guys").
FILLER = frozenset(
    ["um", "umm", "uh", "uhh", "er", "erm", "hmm", "hm", "mm", "mhm", "mmm", "well", "anyway",
     "anyways", "oh", "ah", "eh", "meh", "welp", "guys", "team", "folks", "friend", "pal",
     "bro", "fam", "y'all", "yall", "peeps", "people"]
)  # fmt: skip
#: Words that say a person is present ("you around?", "still there?", "back online").
PRESENCE = frozenset(["around", "there", "here", "online", "awake", "alive", "back"])
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
    anchored = False
    for word in words:
        if (social(word) and word not in FUNCTION_WORDS) or word in APOLOGY:
            anchored = True
        elif word not in FUNCTION_WORDS and word not in FILLER and word not in PRESENCE:
            return False
    return anchored


def _checks_presence(words: Sequence[str]) -> bool:
    """A presence check: only :data:`GREETINGS`, filler and :data:`PRESENCE_CHECK` words,
    one of them a word of presence (:data:`PRESENCE`)."""
    present = False
    for word in words:
        if word in PRESENCE:
            present = True
        elif word not in PRESENCE_CHECK and word not in FILLER and word not in GREETINGS:
            return False
    return present
