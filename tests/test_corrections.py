"""When two close memories disagree: only statements about the same subject that differ in a
value (a number, a negation, a name, a preference) are conflicts; different subjects are not.

The pairs are phrased the way users state facts to an assistant; they were written before
the rule in :mod:`engrain.corrections` and are not tuned to it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from engrain import Engine
from engrain.corrections import disagreement
from engrain.embed import HashEmbedder
from engrain.store import MemoryStore

from .conftest import NOW, make_settings

#: Same subject, a different value: each must be flagged.
TRUE_CONFLICTS = [
    ("The API runs on port 8033", "The API runs on port 9000"),
    ("I prefer tabs", "I prefer spaces"),
    ("I prefer tabs", "I don't like tabs"),
    ("The deadline is March 3", "The deadline is March 10"),
    ("User 12 lives in Paris", "User 12 lives in Rome"),
    ("Alice is 30", "Alice is 31"),
    ("My timezone is Europe/Bratislava", "My timezone is America/New_York"),
    ("We deploy on Fridays", "We never deploy on Fridays"),
    ("The build takes 5 minutes", "The build takes 12 minutes"),
    ("Our staging server is at 10.0.0.5", "Our staging server is at 10.0.0.7"),
    ("I love spicy food", "I hate spicy food"),
    ("My favorite editor is Vim", "My favorite editor is Emacs"),
    ("Service 3 runs on port 8033", "Service 3 runs on port 9033"),
    ("The main database is PostgreSQL", "The main database is MySQL"),
    ("I drink coffee every morning", "I stopped drinking coffee"),
    ("The rate limit is 100 requests per minute", "The rate limit is 250 requests per minute"),
    ("My manager is Sarah", "My manager is David"),
    ("The team uses Python 3.11", "The team uses Python 3.12"),
    ("I'm allergic to peanuts", "I'm not allergic to peanuts"),
    ("My preferred language is Go", "My preferred language is Rust"),
    ("Invoices are due in 30 days", "Invoices are due in 45 days"),
    ("I prefer dark mode", "I prefer light mode"),
    ("Our staging database runs PostgreSQL 15", "The staging database now runs PostgreSQL 16"),
    ("Alice lives in Berlin with her partner", "Alice lives in Munich now, with her partner"),
    ("Update: the API runs on port 9000", "The API runs on port 8033"),
    ("Deadline: March 3", "Deadline: March 10"),
]

#: Different subjects, or statements that add to each other: none may be flagged.
COMPATIBLE = [
    ("Service 3 runs on port 8033", "Service 5 runs on port 8055"),
    ("User 12 lives in Paris", "User 14 lives in Rome"),
    ("Version 2 added caching", "Version 3 removed caching"),
    ("Alice is 30", "Bob is 31"),
    ("Node 1 has 16 GB of RAM", "Node 2 has 32 GB of RAM"),
    ("Ticket 4521 is assigned to Maria", "Ticket 4522 is assigned to Tom"),
    ("The staging database runs on port 5432", "The production database runs on port 5433"),
    ("My sister lives in Berlin", "My brother lives in Munich"),
    ("Bob prefers tabs", "Alice prefers spaces"),
    ("Room 101 is on floor 1", "Room 205 is on floor 2"),
    ("Sprint 14 ends on June 7", "Sprint 15 ends on June 21"),
    ("The frontend runs on port 3000", "The backend runs on port 8000"),
    ("The API runs on port 8033", "The API runs on port 8033 behind nginx"),
    ("I prefer tabs", "I prefer tabs for indentation"),
    ("I speak French", "I speak German"),
    ("I like Python", "I also like Rust"),
    ("Version 2 supports Windows", "Version 3 no longer supports Windows"),
    ("Alice doesn't drink coffee", "Bob drinks coffee every day"),
    ("Port 8033 is used by Service 3", "Port 8055 is used by Service 5"),
    ("Alice prefers tabs", "Alice's team prefers spaces"),
    ("Alice lives in Berlin with her partner", "Alice lives in Berlin and works at Zalando"),
    ("In Service 3, the timeout is 30 seconds", "In Service 5, the timeout is 50 seconds"),
    ("Kubernetes cluster A runs 1.27", "Kubernetes cluster B runs 1.28"),
    ("Service 3: port 8033", "Service 5: port 8055"),
]


@pytest.mark.parametrize(("a", "b"), TRUE_CONFLICTS)
def test_same_subject_different_value_is_a_conflict(a: str, b: str) -> None:
    assert disagreement(a, b) is not None
    assert disagreement(b, a) is not None  # the order the memories arrived in does not matter


@pytest.mark.parametrize(("a", "b"), COMPATIBLE)
def test_different_subjects_or_additions_are_not_conflicts(a: str, b: str) -> None:
    assert disagreement(a, b) is None
    assert disagreement(b, a) is None


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ("The API runs on port 8033", "The API runs on port 9000", "different numbers"),
        ("I prefer tabs", "I don't like tabs", "one negates the other"),
        ("The main database is PostgreSQL", "The main database is MySQL", "different names"),
        ("I prefer tabs", "I prefer spaces", "different preferences"),
        ("I love spicy food", "I hate spicy food", "opposite preferences"),
    ],
)
def test_the_reason_names_the_value_that_differs(a: str, b: str, why: str) -> None:
    assert disagreement(a, b) == why


def test_different_services_are_stored_without_a_warning(tmp_path: Path) -> None:
    eng = Engine(settings=make_settings(tmp_path, conflict_similarity=0.3),
                 store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    first = eng.remember("Service 3 runs on port 8033", "u", "fact", now=NOW)
    second = eng.remember("Service 5 runs on port 8055", "u", "fact", now=NOW)
    assert second.action == "stored" and second.reason is None
    for memory_id in (first.memory_id, second.memory_id):
        assert "conflicts_with" not in eng.get(memory_id or "", "u").provenance.metadata
    ctx = eng.context("Which port does each service run on?", "u", token_budget=500, now=NOW)
    assert "confirm which is current" not in ctx.text
    third = eng.remember("Service 3 runs on port 9033", "u", "fact",
                         now=NOW + timedelta(days=1))  # fmt: skip
    assert third.reason == f"conflicts with {first.memory_id} (different numbers)"
    eng.close()
