"""The programming language a request for code is written in, against the language a
preference is about (relevance gating, between candidates and scoring).

A preference about how code of one language is written ("Java style: records for DTOs,
constructor injection only", "Use fixed-width integer types (uint8_t …)" tagged ``c``)
governs every piece of code written in that language, whatever the code does. A request
for code rarely names its style ("Write the OruR01Mapper for MVH results …", "Write a
function that encodes a reading into the v3 advertising payload"), so embeddings and BM25
rank such a preference near zero (relevance 0.10-0.19 for those the gating evaluation's
writers labelled as needed), under the preferences' floor.

The language of a request (:func:`request_languages`): the languages the message names
(a language's name, a file name with its extension, a fenced block's tag; :data:`LANGUAGES`
is the world's table of languages, not the evaluation's words), else the project's
language: the one that most of the candidates tagged with a language carry, when it is
more than half of them (a project written in one language; a game with a C# client and a
Go server has no such language, and a request that names neither gets none). A memory is
about a language when one of its domains is the language's name or starts with it
("sql-style").

:func:`with_language` raises a preference about the request's language to the relevance
of a memory clearly about the message (:data:`~engrain.recall.area.CONVENTION_RELEVANCE`,
as the area and the kind of work raise theirs) for a request for code
(:data:`CODE_INTENTS`); the preference share and the budget judge it as any preference.
One that governs only a kind of work not asked (``recall.work``: "Tests in JUnit 5 …" for
a request that asks for no test) is left as it is.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from engrain.model import MemoryType
from engrain.recall.area import CONVENTION_RELEVANCE
from engrain.recall.classify import Classification, Intent
from engrain.recall.relevance import Candidate

#: The intents that ask for code to be written.
CODE_INTENTS = frozenset({Intent.GENERATION})
#: The relevance a preference about the request's language is raised to: the area's
#: "clearly about this" level (:data:`~engrain.recall.area.CONVENTION_RELEVANCE`).
LANGUAGE_RELEVANCE = CONVENTION_RELEVANCE

#: Each language: the names a memory's domain or a message uses for it (the first is its
#: own), and the extensions of its files. A name that is also an English word or a single
#: letter ("go", "c", "r") names the language in a message only as a fenced block's tag or
#: a file's extension (:data:`AMBIGUOUS`); as a domain it is the language.
LANGUAGES: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "python": (("python", "py"), ("py", "pyi", "ipynb")),
    "java": (("java",), ("java",)),
    "kotlin": (("kotlin",), ("kt", "kts")),
    "scala": (("scala",), ("scala",)),
    "go": (("go", "golang"), ("go",)),
    "rust": (("rust",), ("rs",)),
    "c": (("c",), ("c", "h")),
    "cpp": (("cpp", "c++"), ("cpp", "cc", "cxx", "hpp", "hh")),
    "csharp": (("csharp", "c#"), ("cs",)),
    "javascript": (("javascript", "js", "node.js", "nodejs"), ("js", "mjs", "cjs", "jsx")),
    "typescript": (("typescript", "ts"), ("ts", "tsx")),
    "ruby": (("ruby",), ("rb",)),
    "php": (("php",), ("php",)),
    "swift": (("swift",), ("swift",)),
    "elixir": (("elixir",), ("ex", "exs")),
    "haskell": (("haskell",), ("hs",)),
    "lua": (("lua",), ("lua",)),
    "dart": (("dart",), ("dart",)),
    "sql": (("sql",), ("sql",)),
    "bash": (("bash", "shell", "sh", "zsh"), ("sh", "bash", "zsh")),
    "r": (("r",), ("r", "rmd")),
}  # fmt: skip
#: The names that are ordinary words or letters too: in a message they say nothing alone.
AMBIGUOUS = frozenset({"go", "c", "r", "sh", "ts", "js", "py", "swift", "dart", "rust", "shell"})

_NAME_TO_LANGUAGE = {name: lang for lang, (names, _) in LANGUAGES.items() for name in names}
_EXTENSION_TO_LANGUAGES: dict[str, list[str]] = {}
for _lang, (_, _extensions) in LANGUAGES.items():
    for _ext in _extensions:
        _EXTENSION_TO_LANGUAGES.setdefault(_ext, []).append(_lang)

_WORD = re.compile(r"(?<![\w.])([a-z][a-z0-9+#.]*[a-z0-9+#]|[a-z])(?![\w#+])", re.IGNORECASE)
_FILE = re.compile(r"\b[\w-]+\.([a-z]{1,5})\b", re.IGNORECASE)
_FENCE = re.compile(r"```\s*([\w#+]+)")
_DOMAIN_PART = re.compile(r"[-_/ ]+")


def named_languages(message: str) -> frozenset[str]:
    """The languages ``message`` names: a language's unambiguous name ("Java", "bash",
    "TypeScript"), a file name's extension ("MllpHandler.java", "main.go") or a fenced
    block's tag (```go)."""
    found: set[str] = set()
    for word in _WORD.findall(message):
        lang = _NAME_TO_LANGUAGE.get(word.lower())
        if lang is not None and word.lower() not in AMBIGUOUS:
            found.add(lang)
    for ext in _FILE.findall(message):
        found.update(_EXTENSION_TO_LANGUAGES.get(ext.lower(), ()))
    for tag in _FENCE.findall(message):
        lang = _NAME_TO_LANGUAGE.get(tag.lower())
        if lang is not None:
            found.add(lang)
    return frozenset(found)


def memory_languages(domains: Sequence[str]) -> frozenset[str]:
    """The languages a memory of ``domains`` is about: a domain that is a language's name
    or whose first part is one ("sql-style", "go_tests")."""
    found = set()
    for domain in domains:
        name = domain.lower()
        lang = _NAME_TO_LANGUAGE.get(name) or _NAME_TO_LANGUAGE.get(_DOMAIN_PART.split(name, 1)[0])
        if lang is not None:
            found.add(lang)
    return frozenset(found)


def project_language(pool: Sequence[Candidate]) -> str | None:
    """The language more than half of the candidates tagged with a language carry (the
    project's own, when it is written in one), or ``None``."""
    counts: Counter[str] = Counter()
    tagged = 0
    for candidate in pool:
        langs = memory_languages(candidate.memory.domains)
        if langs:
            tagged += 1
            counts.update(langs)
    if not counts:
        return None
    lang, n = counts.most_common(1)[0]
    return lang if n * 2 > tagged else None


def request_languages(message: str, pool: Sequence[Candidate]) -> frozenset[str]:
    """The languages of a request for code: those ``message`` names
    (:func:`named_languages`), else the project's (:func:`project_language`)."""
    named = named_languages(message)
    if named:
        return named
    own = project_language(pool)
    return frozenset({own}) if own else frozenset()


def with_language(
    pool: Sequence[Candidate],
    message: str,
    classification: Classification,
    unconcerned: Collection[str] = frozenset(),
) -> tuple[list[Candidate], frozenset[str], frozenset[str]]:
    """``pool`` with each preference about the request's language (:func:`request_languages`)
    raised to :data:`LANGUAGE_RELEVANCE` when the message asks for code
    (:data:`CODE_INTENTS`), most relevant first; the languages, and the ids raised.
    ``unconcerned``: preferences governing only work not asked (``recall.work``), left as
    they are."""
    if classification.intent not in CODE_INTENTS:
        return list(pool), frozenset(), frozenset()
    langs = request_languages(message, pool)
    if not langs:
        return list(pool), frozenset(), frozenset()
    out: list[Candidate] = []
    raised: set[str] = set()
    for candidate in pool:
        memory = candidate.memory
        if (
            memory.memory_type is MemoryType.PROCEDURAL
            and memory.id not in unconcerned
            and candidate.relevance < LANGUAGE_RELEVANCE
            and langs & memory_languages(memory.domains)
        ):
            candidate = replace(candidate, relevance=LANGUAGE_RELEVANCE)
            raised.add(memory.id)
        out.append(candidate)
    if raised:
        out.sort(key=lambda c: c.relevance, reverse=True)
    return out, langs, frozenset(raised)
