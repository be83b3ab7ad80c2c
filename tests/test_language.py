"""A preference about the language a request for code is written in (``recall.language``,
issue 12).

The fixture project's embedder gives each text a planned cosine with the message, so the
style preferences here are as far from the request as the gating evaluation's were
(0.10-0.19): only the rule can bring them in.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Engine, Kind, Memory
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.gate import GateOptions
from engrain.recall.language import (
    LANGUAGE_RELEVANCE,
    memory_languages,
    named_languages,
    project_language,
    request_languages,
    with_language,
)
from engrain.recall.relevance import Candidate
from engrain.store import MemoryStore

from .conftest import NOW, make_settings
from .test_gate_rules import PlannedEmbedder  # messages along axis 0, planned cosines

NAMED = [
    ("Write the mapper in Java", {"java"}),
    ("bash script that checks the certificate expiry", {"bash"}),
    ("CI fails on gateway/src/main/java/com/meridian/MllpHandler.java:88", {"java"}),
    ("rewrite this with qualify:\n```sql\nselect 1\n```", {"sql"}),
    ("```go\nfunc main() {}\n```", {"go"}),
    ("port sync.ts to TypeScript strict mode", {"typescript"}),
    ("the check in firmware/src/ble_adv.c overflows", {"c"}),
    ("C# or c++ for the client?", {"csharp", "cpp"}),
    # a name that is a word or a letter too says nothing alone
    ("Let's go with the C option", set()),
    ("open a shell on the box", set()),
    ("Write the OruR01Mapper for MVH results", set()),
]  # fmt: skip


@pytest.mark.parametrize(("message", "languages"), NAMED)
def test_the_languages_a_message_names(message: str, languages: set[str]) -> None:
    assert named_languages(message) == languages


def test_a_memory_is_about_the_language_its_domains_name() -> None:
    assert memory_languages(("java", "style")) == {"java"}
    assert memory_languages(("c",)) == {"c"}
    assert memory_languages(("sql-style",)) == {"sql"}  # a domain's first part
    assert memory_languages(("csharp", "client")) == {"csharp"}
    assert memory_languages(("golang",)) == {"go"}
    assert memory_languages(("style", "testing", "ios")) == frozenset()  # "ios" is no "c"


def _candidate(content: str, kind: Kind, relevance: float, *domains: str) -> Candidate:
    memory = Memory.new("ada", content, kind.default_memory_type, kind, domains=domains,
                        now=NOW)  # fmt: skip
    return Candidate(memory, relevance, 0.0, relevance)


JAVA = _candidate("Records for DTOs, constructor injection only.", Kind.PREFERENCE, 0.1,
                  "java", "style")  # fmt: skip
JAVA_TIME = _candidate("java.time only: Instant and an injected Clock.", Kind.PREFERENCE, 0.15,
                       "java")  # fmt: skip
GO = _candidate("Errors wrapped with %w; no panics in reconcile loops.", Kind.PREFERENCE, 0.1,
                "go")  # fmt: skip
BASH = _candidate("Shell scripts start with set -euo pipefail.", Kind.PREFERENCE, 0.1, "bash")
JAVA_PATTERN = _candidate("Mappers are pure functions of the message.", Kind.PATTERN, 0.1,
                          "java")  # fmt: skip
PLAIN = _candidate("Keep answers short: the diff first.", Kind.PREFERENCE, 0.1)


def test_the_project_language_is_the_one_most_of_its_tagged_memories_carry() -> None:
    assert project_language([JAVA, JAVA_TIME, JAVA_PATTERN, BASH, PLAIN]) == "java"
    # two languages of one weight (a C# client, a Go server): no language of the project
    assert project_language([JAVA, GO]) is None
    assert project_language([JAVA, JAVA_TIME, GO, BASH]) is None  # half is not a majority
    assert project_language([PLAIN]) is None
    # a language the message names wins over the project's
    assert request_languages("bash script that prints days left", [JAVA, JAVA_TIME]) == {"bash"}
    assert request_languages("Write the AuditRecorder", [JAVA, JAVA_TIME, BASH]) == {"java"}


def _classified(intent: Intent) -> Classification:
    return Classification(Complexity.MODERATE, intent, (), 0, False, False, ())


def test_a_java_request_raises_the_java_preferences_not_the_go_one() -> None:
    pool = [PLAIN, JAVA, JAVA_TIME, GO, BASH, JAVA_PATTERN]
    out, langs, raised = with_language(pool, "Write the AuditEvent record in Java",
                                       _classified(Intent.GENERATION))  # fmt: skip
    assert langs == {"java"}
    assert raised == {JAVA.id, JAVA_TIME.id}
    relevance = {c.id: c.relevance for c in out}
    assert relevance[JAVA.id] == relevance[JAVA_TIME.id] == LANGUAGE_RELEVANCE
    assert relevance[GO.id] == relevance[BASH.id] == relevance[PLAIN.id] == 0.1
    assert relevance[JAVA_PATTERN.id] == 0.1  # a pattern is the area's business
    assert [c.id for c in out][:2] == [JAVA.id, JAVA_TIME.id]  # most relevant first
    # the Go request the Go one
    _, _, raised = with_language(pool, "```go\nfunc Reconcile() {}\n``` finish this",
                                 _classified(Intent.GENERATION))  # fmt: skip
    assert raised == {GO.id}


def test_only_a_request_for_code_and_only_what_it_asks_for() -> None:
    pool = [JAVA, JAVA_TIME, JAVA_PATTERN]
    for intent in (Intent.QUESTION, Intent.DEBUGGING, Intent.ANALYSIS, Intent.DISCUSSION):
        out, langs, raised = with_language(pool, "Java records?", _classified(intent))
        assert (langs, raised) == (frozenset(), frozenset())
        assert [c.relevance for c in out] == [0.1, 0.15, 0.1]
    # a preference governing only work not asked (recall.work) is left as it is
    _, _, raised = with_language(pool, "Write it in Java", _classified(Intent.GENERATION),
                                 unconcerned={JAVA_TIME.id})  # fmt: skip
    assert raised == {JAVA.id}
    # never lowered
    close = _candidate("Records everywhere.", Kind.PREFERENCE, 0.9, "java")
    out, _, raised = with_language([close], "Write it in Java", _classified(Intent.GENERATION))
    assert out[0].relevance == 0.9 and raised == frozenset()


# -- end to end: a project with a Java service and a Go one ----------------------------------

JAVA_MSG = "Write the AuditRecorder.java class that stores an audit event"
QUESTION_MSG = "What does the AuditRecorder store, and when?"
AUDIT = "AuditRecorder writes an audit_event row in the caller's transaction."
JAVA_STYLE = "Java style: records for DTOs, constructor injection only, no Lombok."
GO_STYLE = "Go style: errors wrapped with %w, no naked returns."


def _project(tmp_path: Path) -> tuple[Engine, dict[str, str]]:
    cosines = {AUDIT: 0.7, JAVA_STYLE: 0.12, GO_STYLE: 0.12}
    embedder = PlannedEmbedder([JAVA_MSG, QUESTION_MSG], cosines)
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=embedder)
    when = NOW - timedelta(days=30)
    ids = {
        "fact": engine.remember(AUDIT, "ada", "fact", domains=["audit"], now=when).memory_id,
        "java": engine.remember(JAVA_STYLE, "ada", "preference", key="java-style",
                                domains=["java", "style"], now=when).memory_id,
        "go": engine.remember(GO_STYLE, "ada", "preference", key="go-style",
                              domains=["go", "style"], now=when).memory_id,
    }  # fmt: skip
    return engine, {k: v or "" for k, v in ids.items()}


LANGUAGE = GateOptions(language=True)


def test_a_java_request_gets_the_java_style_preference_not_the_go_one(tmp_path: Path) -> None:
    engine, ids = _project(tmp_path)
    gated = engine.explain(JAVA_MSG, "ada", options=LANGUAGE, now=NOW)
    assert gated.classification.intent is Intent.GENERATION
    assert "language: java" in gated.classification.signals
    chosen = {m.id for m in gated.memories}
    assert ids["java"] in chosen  # cosine 0.12: under the floor without the rule
    assert gated.components[ids["java"]]["language"] == 1.0
    assert ids["go"] not in chosen
    assert "language" not in gated.components[ids["go"]]
    got = engine.context(JAVA_MSG, "ada", options=LANGUAGE, now=NOW)
    assert ids["java"] in {m.id for m in got.memories}


def test_the_rule_is_off_by_default(tmp_path: Path) -> None:
    # not adopted (docs/decisions.md, "Session 20: two gate rules with a reason (h10)")
    engine, ids = _project(tmp_path)
    gated = engine.explain(JAVA_MSG, "ada", now=NOW)
    assert ids["java"] not in {m.id for m in gated.memories}
    assert "language" not in gated.components[ids["java"]]
    assert not any(s.startswith("language:") for s in gated.classification.signals)


def test_a_question_about_java_code_does_not_get_it(tmp_path: Path) -> None:
    engine, ids = _project(tmp_path)
    gated = engine.explain(QUESTION_MSG, "ada", options=LANGUAGE, now=NOW)
    assert gated.classification.intent is not Intent.GENERATION
    assert ids["fact"] in {m.id for m in gated.memories}
    assert ids["java"] not in {m.id for m in gated.memories}
    assert not any(s.startswith("language:") for s in gated.classification.signals)
