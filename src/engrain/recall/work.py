"""The kind of work a message asks for, against the work a preference governs (relevance
gating, between candidates and scoring).

A preference says how the user wants one kind of work done: "Name tests
test_<behaviour>_when_<condition>" governs writing tests, "Commit messages in the imperative
with a scope prefix" governs commit messages, "Explain statistics intuitively first"
governs explanations. A message that asks for that work needs it whatever the message is
about ("Cover the proration calculation with tests" is about proration and asks for tests;
"tiny util …, typed, with a test" asks for typed code), and one that asks for other work
does not, however close its subject. Embeddings and BM25 measure the subject: a short
preference line shares little of it with a longer request (relevance 0.0-0.23 for the
preferences the gating evaluation's writers labelled as needed and the gate missed).

:data:`ASKED` names each kind of work by the words that say it in a message; a message
also asks for an explanation when its intent is an analysis, and for help with an error
when it reports a bug with pasted code or output. A preference governs the kinds its
*scope* names (:func:`scope_of`: its opening condition, "When I paste a log", "In review
comments for contributors", else its first statement, "Commit messages follow
Conventional Commits with the crate as scope"; :data:`GOVERNS`), not every kind it
mentions ("Keep answers short: … then at most a paragraph of explanation" governs every
answer, "In issue replies, link the relevant docs page" governs replies, not docs).

:func:`with_work` raises a procedural memory that governs a kind of work the message asks
for to the relevance of a memory clearly about the message
(:data:`~engrain.recall.area.CONVENTION_RELEVANCE`, as the area raises a convention); the
preference share and the budget judge it as any preference. One that governs only kinds
the message does not ask for is not a convention of this request, so the area does not
raise it (``area.with_area``'s ``unconcerned``): its own relevance judges it. A preference
that names no kind of work ("Prefer pathlib over os.path") is untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from enum import StrEnum
from functools import lru_cache

from engrain.model import MemoryType
from engrain.recall.area import CONVENTION_RELEVANCE
from engrain.recall.classify import Classification, Intent
from engrain.recall.relevance import Candidate


class Work(StrEnum):
    """A kind of work a message asks for and a preference governs."""

    TESTS = "tests"
    REVIEW = "review"
    COMMITS = "commits"
    CHANGELOG = "changelog"
    DOCS = "docs"
    DEPENDENCIES = "dependencies"
    BENCHMARKS = "benchmarks"
    COMMANDS = "commands"
    TYPES = "types"
    PLOTS = "plots"
    EXPLANATION = "explanation"
    ERRORS = "errors"


def _words(*patterns: str) -> re.Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(patterns) + r")\b", re.IGNORECASE)


#: Each kind of work and the words that say it in a message.
ASKED: Mapping[Work, re.Pattern[str]] = {
    Work.TESTS: _words(r"tests?", r"testing", r"e2e"),
    Work.REVIEW: _words(r"review(?:s|ing|ed)?"),
    Work.COMMITS: _words(r"commit messages?", r"commits?", r"pull requests?", r"prs?", r"git",
                         r"rebase"),
    Work.CHANGELOG: _words(r"changelogs?", r"release notes?"),
    Work.DOCS: _words(r"docs?", r"documentation", r"readme", r"docstrings?", r"doc comments?",
                      r"blog posts?", r"diagrams?"),
    Work.DEPENDENCIES: _words(r"dependenc(?:y|ies)"),
    Work.BENCHMARKS: _words(r"benchmarks?", r"benches", r"bench"),
    Work.COMMANDS: _words(r"commands?", r"shell", r"bash", r"fish", r"terminal"),
    Work.TYPES: _words(r"typed", r"type hints?", r"type-annotated?", r"typescript", r"mypy"),
    Work.PLOTS: _words(r"plots?", r"plotting", r"charts?", r"figures?"),
    Work.EXPLANATION: _words(r"explain\w*", r"walk me through", r"help me understand"),
    Work.ERRORS: _words(r"errors?", r"tracebacks?", r"stack traces?"),
}  # fmt: skip
#: The words that say a kind of work in a preference's scope, where they differ: a
#: preference governs an explanation when it asks for one ("Explain statistics
#: intuitively first", "When explaining a procedure"), not when it names one ("Comments
#: explain why"); it governs the errors and logs a user pastes or meets ("When I paste a
#: log", "borrow-checker and lifetime errors"), not those the code returns ("API errors are
#: returned as RFC 7807").
GOVERNS: Mapping[Work, re.Pattern[str]] = {
    **ASKED,
    Work.EXPLANATION: re.compile(r"^explain\b|\bwhen (?:you )?explain(?:ing)?\b",
                                 re.IGNORECASE),
    Work.ERRORS: _words(r"(?:I|you) paste", r"pasted? (?:an? |the )?(?:logs?|errors?|tracebacks?)",
                        r"errors? (?:messages?|output)",
                        r"(?:borrow-checker|lifetime|compiler|build|type) (?:and [\w-]+ )?errors?",
                        r"tracebacks?", r"stack traces?"),
}  # fmt: skip

#: The words that open a condition: "When X, …", "In X, …", "For X, …".
_CONDITION = re.compile(r"^(?:when|whenever|if|in|for|before|after)\b", re.IGNORECASE)
#: Where a preference's first statement ends.
_STATEMENT_END = re.compile(r"[:;]|\.(?:\s|$)")

#: The intents that ask for an explanation whatever their words.
EXPLAINING = frozenset({Intent.ANALYSIS})


def scope_of(content: str) -> str:
    """The part of a preference that says what it governs: its opening condition ("When
    I paste a log", "In review comments for contributors") when it has one, else its first
    statement ("Commit messages follow Conventional Commits with the crate as scope", not
    the example after the colon)."""
    text = content.strip()
    match = _STATEMENT_END.search(text)
    first = text[: match.start()] if match else text
    if _CONDITION.match(first):
        return first.split(",", 1)[0]
    return first


@lru_cache(maxsize=4096)
def governed(content: str) -> frozenset[Work]:
    """The kinds of work a preference of ``content`` governs: those its scope
    (:func:`scope_of`) names."""
    scope = scope_of(content)
    return frozenset(work for work, words in GOVERNS.items() if words.search(scope))


def asked(message: str, classification: Classification) -> frozenset[Work]:
    """The kinds of work ``message`` asks for: those it names, an explanation when its
    intent is an analysis and errors when it reports a bug with pasted code or output."""
    found = {work for work, words in ASKED.items() if words.search(message)}
    if classification.intent in EXPLAINING:
        found.add(Work.EXPLANATION)
    if classification.intent is Intent.DEBUGGING and classification.has_code:
        found.add(Work.ERRORS)
    return frozenset(found)


def with_work(
    pool: Sequence[Candidate], message: str, classification: Classification
) -> tuple[list[Candidate], dict[str, frozenset[Work]], frozenset[str]]:
    """``pool`` with each procedural memory that governs a kind of work ``message`` asks
    for (:func:`asked`, :func:`governed`) raised to :data:`CONVENTION_RELEVANCE`, most
    relevant first; the kinds asked of each procedural memory that governs some (raised or
    already as relevant), and the ids of those that govern only work not asked."""
    wanted = asked(message, classification)
    out: list[Candidate] = []
    applies: dict[str, frozenset[Work]] = {}
    other: set[str] = set()
    for candidate in pool:
        memory = candidate.memory
        if memory.memory_type is MemoryType.PROCEDURAL:
            works = governed(memory.content)
            if works & wanted:
                applies[memory.id] = works & wanted
                if candidate.relevance < CONVENTION_RELEVANCE:
                    candidate = replace(candidate, relevance=CONVENTION_RELEVANCE)
            elif works:
                other.add(memory.id)
        out.append(candidate)
    if applies:
        out.sort(key=lambda c: c.relevance, reverse=True)
    return out, applies, frozenset(other)
