"""A pool candidate with another relevance (recall.rescored)."""

from __future__ import annotations

from dataclasses import fields, replace

from engrain.model import Kind, Memory, MemoryType
from engrain.recall.relevance import Candidate
from engrain.recall.rescored import rescored

from .conftest import NOW


def test_rescored_equals_replace_and_names_every_field() -> None:
    memory = Memory(
        id="m", user_id="u", content="Caroline: hi", memory_type=MemoryType.EPISODIC,
        kind=Kind.EVENT, created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    candidate = Candidate(memory, 0.42, 0.7, 0.9, 0.3)
    out = rescored(candidate, 0.25)
    assert out == replace(candidate, relevance=0.25)
    assert out.memory is memory and candidate.relevance == 0.9
    # a field added to Candidate must be carried here too
    assert [f.name for f in fields(Candidate)] == [
        "memory", "similarity", "lexical", "relevance", "no_evidence",
    ]  # fmt: skip
