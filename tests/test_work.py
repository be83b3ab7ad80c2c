"""A preference judged by the kind of work a message asks for (``recall.work``, issue 12).

The fixture project's embedder gives each text a planned cosine with the message, so the
preferences here are as far from the request as the gating evaluation's were (0.0-0.2):
only the rule can bring them in.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Engine, Kind, Memory, MemoryType
from engrain.recall.area import CONVENTION_RELEVANCE, with_area
from engrain.recall.classify import Classification, Complexity, Intent, classify
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import Candidate
from engrain.recall.work import Work, asked, governed, scope_of, with_work
from engrain.store import MemoryStore

from .conftest import NOW, make_settings
from .test_gate_rules import PlannedEmbedder  # messages along axis 0, planned cosines

# -- what a preference governs: its scope ----------------------------------------------------

SCOPES = [
    ("Keep answers short: lead with the code or the command, explanation after.",
     "Keep answers short", set()),
    ("When I paste a log, first point at the line that matters, then explain.",
     "When I paste a log", {Work.ERRORS}),
    ("In issue replies, link the relevant docs page instead of re-explaining it.",
     "In issue replies", set()),
    ("Commit messages follow Conventional Commits with the crate as scope: `docs: ...`.",
     "Commit messages follow Conventional Commits with the crate as scope", {Work.COMMITS}),
    ("Prefer pytest.mark.parametrize over loops inside a test.",
     "Prefer pytest.mark.parametrize over loops inside a test", {Work.TESTS}),
    ("Comments explain why, not what; don't add comments that restate the code.",
     "Comments explain why, not what", set()),
    ("When tuning a SQLite query, show the EXPLAIN QUERY PLAN before and after.",
     "When tuning a SQLite query", set()),
]  # fmt: skip


@pytest.mark.parametrize(("content", "scope", "works"), SCOPES)
def test_a_preference_governs_what_its_scope_names(
    content: str, scope: str, works: set[Work]
) -> None:
    # the scope is the opening condition, else the first statement: not the example after a
    # colon, not what the rule mentions on the way ("explanation after", "the docs page")
    assert scope_of(content) == scope
    assert governed(content) == works


GOVERNED = [
    ("Name tests test_<behaviour>_when_<condition>.", {Work.TESTS}),
    ("In code reviews, list accessibility problems first.", {Work.REVIEW}),
    ("Keep PRs under ~400 changed lines.", {Work.COMMITS}),
    ("Changelog entries grouped under Added, Changed and Fixed.", {Work.CHANGELOG}),
    ("Docstrings in NumPy style.", {Work.DOCS}),
    ("When you suggest a new dependency, say whether it contains native code.",
     {Work.DEPENDENCIES}),
    ("Benchmark results: a table with before/after medians.", {Work.BENCHMARKS}),
    ("My shell is fish: give commands that work in fish.", {Work.COMMANDS}),
    ("TypeScript strict everywhere; no `any`.", {Work.TYPES}),
    ("Use the colour-blind-safe Okabe-Ito palette in every plot.", {Work.PLOTS}),
    ("Explain statistics intuitively first, then give the formula.", {Work.EXPLANATION}),
    ("When explaining a procedure, use numbered steps rather than prose.",
     {Work.EXPLANATION}),
    ("Explain borrow-checker and lifetime errors by naming the exact borrows.",
     {Work.EXPLANATION, Work.ERRORS}),
    # names no kind of work: judged on relevance alone
    ("Prefer pathlib over os.path.", set()),
    ("API errors are returned as RFC 7807 problem+json.", set()),  # errors it returns
    ("Rust snippets include their `use` lines so they compile when pasted.", set()),
]  # fmt: skip


@pytest.mark.parametrize(("content", "works"), GOVERNED)
def test_each_kind_of_work_a_preference_governs(content: str, works: set[Work]) -> None:
    assert governed(content) == works


def _classified(intent: Intent, has_code: bool = False) -> Classification:
    return Classification(Complexity.MODERATE, intent, (), 0, has_code, False, ())


def test_the_work_a_message_asks_for() -> None:
    generation = _classified(Intent.GENERATION)
    assert asked("Cover the proration calculation with tests", generation) == {Work.TESTS}
    assert asked("tiny util for the badge, typed, with a test", generation) == {
        Work.TYPES, Work.TESTS}  # fmt: skip
    assert asked("Draft the CHANGELOG lines for #1498", generation) == {Work.CHANGELOG}
    assert asked("Let customers download a year of invoices", generation) == frozenset()
    # an analysis asks for an explanation whatever its words
    why = "why tweedie and not plain l2 for the global model"
    assert asked(why, _classified(Intent.ANALYSIS)) == {Work.EXPLANATION}
    assert asked(why, _classified(Intent.QUESTION)) == frozenset()
    # a bug report with pasted code or output asks for help with that error
    pasted = "cannot borrow `*site` as mutable"
    assert asked(pasted, _classified(Intent.DEBUGGING, has_code=True)) == {Work.ERRORS}
    assert asked("the nightly job hangs", _classified(Intent.DEBUGGING)) == frozenset()


def _candidate(content: str, kind: Kind, relevance: float, *domains: str) -> Candidate:
    memory = Memory.new("ada", content, kind.default_memory_type, kind, domains=domains,
                        now=NOW)  # fmt: skip
    return Candidate(memory, relevance, 0.0, relevance)


def test_with_work_raises_the_preferences_for_the_work_asked_and_only_preferences() -> None:
    naming = _candidate("Name tests test_<behaviour>_when_<condition>.", Kind.PREFERENCE, 0.05)
    close = _candidate("Prefer pytest.mark.parametrize over loops inside a test.",
                       Kind.PREFERENCE, 0.8)  # fmt: skip
    commits = _candidate("Commit messages in the imperative.", Kind.PREFERENCE, 0.1)
    general = _candidate("Prefer early returns over nested ifs.", Kind.PREFERENCE, 0.1)
    pattern = _candidate("Tests build their data with factories, not fixtures.", Kind.PATTERN,
                         0.1)  # fmt: skip
    pool = [close, commits, general, pattern, naming]
    out, applies, other = with_work(pool, "Cover the proration with tests",
                                    _classified(Intent.GENERATION))  # fmt: skip
    relevance = {c.id: c.relevance for c in out}
    assert relevance[naming.id] == CONVENTION_RELEVANCE  # raised: it governs tests
    assert relevance[close.id] == 0.8  # never lowered
    assert relevance[pattern.id] == 0.1  # a pattern is the area's business, not this rule's
    assert relevance[commits.id] == relevance[general.id] == 0.1
    assert applies == {naming.id: {Work.TESTS}, close.id: {Work.TESTS}}
    assert other == {commits.id}  # governs other work; the general one governs none
    assert [c.id for c in out][:2] == [close.id, naming.id]  # most relevant first


def test_the_area_does_not_raise_a_preference_for_other_work() -> None:
    # "Let customers download invoices as a zip" is about billing: the billing area's code
    # convention applies, its commit-message preference does not (it asks for no commit)
    fact = _candidate("Invoices are PDFs in S3 under invoices/<year>/.", Kind.FACT, 1.0,
                      "billing")  # fmt: skip
    code = _candidate("Money is integer cents, never floats.", Kind.PREFERENCE, 0.1, "billing")
    commits = _candidate("Commit messages in the imperative with a billing: prefix.",
                         Kind.PREFERENCE, 0.1, "billing")  # fmt: skip
    message = "Let customers download all invoices of a year as one zip"
    generation = _classified(Intent.GENERATION)
    pool, _, other = with_work([fact, code, commits], message, generation)
    assert other == {commits.id}
    _, area, raised = with_area(pool, generation, unconcerned=other)
    assert area == ("billing",)
    assert raised == {code.id}
    assert with_area([fact, code, commits], generation)[2] == {code.id, commits.id}


# -- end to end: a fixture project -----------------------------------------------------------

TEST_MSG = "Cover the proration calculation in services/proration.py with tests"
WHY_MSG = "Explain how the proration of a plan change is computed"
PRORATION = "Proration is computed per line item in services/proration.py, rounded per line"
NAMING = "Name tests test_<behaviour>_when_<condition>."
COMMITS = "Commit messages in the imperative with a scope prefix."
EARLY = "Prefer early returns over nested ifs."


def _project(tmp_path: Path) -> tuple[Engine, dict[str, str]]:
    cosines = {PRORATION: 0.7, NAMING: 0.05, COMMITS: 0.05, EARLY: 0.05}
    embedder = PlannedEmbedder([TEST_MSG, WHY_MSG], cosines)
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=embedder)
    when = NOW - timedelta(days=30)
    ids = {
        "fact": engine.remember(PRORATION, "ada", "fact", domains=["billing"],
                                now=when).memory_id or "",
        "naming": engine.remember(NAMING, "ada", "preference", key="test-names",
                                  now=when).memory_id or "",
        "commits": engine.remember(COMMITS, "ada", "preference", key="commits",
                                   domains=["billing"], now=when).memory_id or "",
        "early": engine.remember(EARLY, "ada", "preference", key="early-returns",
                                 now=when).memory_id or "",
    }  # fmt: skip
    return engine, ids


def test_a_request_for_tests_gets_the_testing_preference(tmp_path: Path) -> None:
    engine, ids = _project(tmp_path)
    gated = engine.explain(TEST_MSG, "ada", now=NOW)
    assert gated.classification.intent is Intent.GENERATION
    assert "work: tests" in gated.classification.signals
    chosen = {m.id for m in gated.memories}
    assert ids["naming"] in chosen  # cosine 0.05: the work it governs brings it in
    assert gated.components[ids["naming"]]["work"] == 1.0
    assert gated.components[ids["naming"]]["calibrated_relevance"] == pytest.approx(0.5)
    assert ids["commits"] not in chosen  # governs commits: not asked
    assert ids["early"] not in chosen  # governs no kind of work: its relevance judges it
    assert ids["naming"] in {m.id for m in engine.context(TEST_MSG, "ada", now=NOW).memories}


def test_a_message_asking_for_other_work_does_not_get_it(tmp_path: Path) -> None:
    engine, ids = _project(tmp_path)
    gated = engine.explain(WHY_MSG, "ada", now=NOW)
    assert gated.classification.intent is Intent.ANALYSIS
    assert ids["fact"] in {m.id for m in gated.memories}
    assert ids["naming"] not in {m.id for m in gated.memories}
    assert "work" not in gated.components[ids["naming"]]
    # the analysis's area (billing) raises a convention of it, not a commit-message rule
    assert "area_convention" not in gated.components[ids["commits"]]
    assert gated.components[ids["commits"]]["other_work"] == 1.0
    assert "other_work" not in gated.components[ids["early"]]
    assert ids["commits"] not in {m.id for m in gated.memories}


def test_the_rule_can_be_turned_off(tmp_path: Path) -> None:
    engine, ids = _project(tmp_path)
    off = engine.explain(TEST_MSG, "ada", options=GateOptions(work=False), now=NOW)
    assert ids["naming"] not in {m.id for m in off.memories}
    assert not any(s.startswith("work:") for s in off.classification.signals)


def test_a_pasted_borrow_error_gets_the_preference_on_explaining_such_errors() -> None:
    message = "My plugin gets `cannot borrow *site as mutable because it is also borrowed`"
    classification = classify(message)
    assert classification.has_code
    pref = _candidate("Explain borrow-checker and lifetime errors by naming the borrows.",
                      Kind.PREFERENCE, 0.2)  # fmt: skip
    debugging = Classification(classification.complexity, Intent.DEBUGGING,
                               classification.domains, 0, True, False, ())  # fmt: skip
    out, applies, _ = with_work([pref], message, debugging)
    assert applies == {pref.id: {Work.ERRORS}}
    assert out[0].relevance == CONVENTION_RELEVANCE
    assert MemoryType.PROCEDURAL is Kind.PREFERENCE.default_memory_type
