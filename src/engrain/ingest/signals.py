"""Local text signals shared by importance scoring and type routing. Rules only, no model."""

from __future__ import annotations

import re
from functools import lru_cache

from engrain.tokens import count_tokens

PREFERENCE = re.compile(
    r"\b(?:i\s+(?:really\s+|strongly\s+)?(?:prefer|always|never|hate|love|dislike|like)"
    r"|i'?d\s+rather|my\s+favou?rite"
    # stated about the user, as the seeds' own examples are ("User prefers Jellyfin over Plex")
    r"|(?:user|he|she|(?-i:[A-Z][a-z]+))\s+(?:really\s+|strongly\s+)?prefers"
    r"|(?:we|they)\s+(?:really\s+|strongly\s+)?prefer"
    r"|(?:the\s+)?user\s+(?:really\s+|strongly\s+)?(?:likes|loves|hates|dislikes|wants))\b",
    re.IGNORECASE,
)
#: A preference written as a labelled note ("Communication style: direct, technical, no
#: preamble."): the label names what the preference is about, so it is also the key.
PREFERENCE_LABEL = re.compile(
    r"^\s*((?:[A-Za-z][\w-]*\s+){0,2}(?:style|preferences?|tone))\s*:", re.IGNORECASE
)
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
NUMBER_OR_DATE = re.compile(
    rf"\d|\b(?:{_MONTHS}|{_DAYS}|yesterday|tomorrow|tonight|last\s+(?:week|month|year)"
    r"|next\s+(?:week|month|year))\b",
    re.IGNORECASE,
)
CURRENT = re.compile(
    r"\b(?:right\s+now|at\s+the\s+moment|currently|for\s+now|at\s+present|this\s+session"
    r"|in\s+this\s+(?:conversation|chat)|today|this\s+week|i'?m\s+(?:now|currently))\b",
    re.IGNORECASE,
)
_NOT_NAMES = frozenset(
    [
        *[
            "i",
            "i'm",
            "i've",
            "i'd",
            "i'll",
            "im",
            "ive",
            "ok",
            "okay",
            "yes",
            "no",
            "hi",
            "hey",
            "hello",
            "thanks",
            "thank",
            "wow",
            "oh",
            "yeah",
            "sure",
            "the",
            "a",
            "an",
            "and",
            "but",
            "or",
            "so",
            "if",
            "when",
            "what",
            "why",
            "how",
            "where",
            "who",
            "which",
            "this",
            "that",
            "these",
            "those",
            "it",
            "its",
            "it's",
            "we",
            "you",
            "he",
            "she",
            "they",
            "my",
            "our",
            "your",
            "his",
            "her",
            "their",
            "there",
            "here",
        ],
        *_MONTHS.split("|"),
        *_DAYS.split("|"),
    ]
)
_WORD = re.compile(r"[A-Za-z][\w'\-]*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*|[\"“(]\s*)$")
_CODE_LIKE = re.compile(
    r"`[^`]+`|\b\w+_\w+\b|\b[a-z]+[A-Z]\w*\b|\b\w+\.\w+\(|\b[a-zA-Z]+\d+[a-zA-Z]*\b"
    r"|\b[\w-]+\.(?:py|js|ts|rs|go|java|toml|json|yaml|yml|sql|md)\b|--[a-z][\w-]+"
)
_ACRONYM = re.compile(r"\b[A-Z]{2,6}s?\b")
#: What each alternative of :data:`_CODE_LIKE` cannot match without (a backtick, an
#: underscore, a parenthesis, ``--``, a lower-case letter before a capital, a letter before
#: a digit, a file extension): a cheap scan that rules out most prose before the full one.
_CODE_LIKE_NEEDS = re.compile(
    r"[`_(]|--|[a-z][A-Z]|[a-zA-Z]\d|\.(?:py|js|ts|rs|go|java|toml|json|yaml|yml|sql|md)\b"
)

SPO_FACT = re.compile(
    r"^(?:(?:my|our|the|his|her|their|your)\s+[\w-]+(?:\s+[\w-]+)?|[A-Z][\w-]+(?:\s+[A-Z][\w-]+)*"
    r"|i|we|he|she|they|it)\s+(?:is|are|was|were|has|have|had|uses?|lives?|works?|runs?|owns?"
    r"|stud(?:y|ies|ied)|speaks?|moved|was\s+born|got\s+married|is\s+called|is\s+named"
    r"|depends\s+on|requires?|contains?|belongs\s+to)\b[^?]*[.!]?$",
    re.IGNORECASE,
)


def has_preference(text: str) -> bool:
    """ "I prefer", "I always", "I hate", "my favorite" and their close variants, the same
    said of the user ("User prefers …"), or a labelled note ("Communication style: …")."""
    return PREFERENCE.search(text) is not None or PREFERENCE_LABEL.match(text) is not None


def has_number_or_date(text: str) -> bool:
    """A digit, a month or weekday name, or a relative date expression."""
    return NUMBER_OR_DATE.search(text) is not None


def is_about_now(text: str) -> bool:
    """Explicitly about the present moment or the current session."""
    return CURRENT.search(text) is not None


def has_named_entity(text: str) -> bool:
    """A capitalised word that does not start a sentence and is not a common word, or an
    acronym (AWS, NASA): a person, organisation, place or product by the usual convention."""
    for match in _WORD.finditer(text):
        word = match.group(0)
        if not word[0].isupper() or word.lower().rstrip("'s") in _NOT_NAMES:
            continue
        if _SENTENCE_START.search(text[: match.start()]) is None:
            return True
    return any(m.group(0).rstrip("s") not in {"I", "OK"} for m in _ACRONYM.finditer(text))


@lru_cache(maxsize=65_536)
def _is_rare_word(word: str) -> bool:
    # Common English words are one cl100k token (with their leading space); a short word
    # that needs three or more pieces is rare in the tokenizer's training text.
    return len(word) >= 5 and count_tokens(" " + word.lower()) >= 3


def has_technical_term(text: str) -> bool:
    """Code-like tokens (snake_case, camelCase, file names, flags, `code`) or a word that is
    rare by its BPE token count."""
    if _CODE_LIKE_NEEDS.search(text) and _CODE_LIKE.search(text):
        return True
    return any(_is_rare_word(w) for w in _WORD.findall(text) if w.isalpha() and len(w) <= 14)


def is_fact(text: str) -> bool:
    """The first sentence reads as subject–predicate–object ("My drive is at /mnt/media")."""
    first = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)[0]
    return SPO_FACT.match(first) is not None


_KEY_STOP = frozenset(
    [
        "i",
        "a",
        "an",
        "the",
        "to",
        "of",
        "in",
        "on",
        "for",
        "with",
        "my",
        "me",
        "and",
        "or",
        "over",
        "than",
        "that",
        "this",
        "it",
        "is",
        "be",
        "use",
        "using",
        "prefer",
        "always",
        "never",
        "hate",
        "love",
        "dislike",
        "like",
        "rather",
        "favorite",
        "favourite",
        "really",
        "strongly",
        "d",
        "i'd",
        "when",
        "please",
        "user",
        "prefers",
        "likes",
        "loves",
        "hates",
        "dislikes",
        "wants",
    ]
)


def preference_key(text: str) -> str:
    """A stable key for a procedural memory: a labelled note's label ("Communication style:
    …" → "communication-style", so a new style replaces the old), else up to four content
    words after the preference phrase ("I prefer tabs over spaces" → "tabs-spaces")."""
    label = PREFERENCE_LABEL.match(text)
    if label:
        return "-".join(w.lower() for w in _WORD.findall(label.group(1)))
    match = PREFERENCE.search(text)
    tail = text[match.end() :] if match else text
    words = [w.lower() for w in _WORD.findall(tail) if w.lower() not in _KEY_STOP]
    if not words:
        words = [w.lower() for w in _WORD.findall(text)][:4]
    return "-".join(words[:4]) or "preference"
