"""Pieces of different numbers are no evidence of a topic (issue 12): a typed memory that
shares with the message nothing but digit runs of numbers written differently ("00" of
"24:00:00" and of "15:00") gets no lexical credit (``recall.relevance.fragments_only``); a
number written the same in both ("3.1.2"), any shared word, or a conversation chunk keeps it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from engrain import Engine
from engrain.model import Kind, Memory, MemoryType, Provenance
from engrain.recall.gate import GateOptions
from engrain.recall.relevance import fragments_only, gather, written_numbers
from engrain.store import MemoryStore
from engrain.store.base import MemoryFilter
from engrain.store.lexical import tokenize

from .conftest import make_settings
from .test_gate_rules import PlannedEmbedder

NOW = datetime(2026, 1, 15, 12, tzinfo=UTC)
MESSAGE = "slurm killed my TFT job at exactly 24:00:00, is that a limit?"
DEMOS = "Priya's team demos on Fridays at 15:00."
LIMIT = "The GPU partition ends every job at 24:00:00 (its time limit); checkpoint before."


def _memory(content: str, cosine: float, axis: int, turns: tuple[str, ...] = ()) -> Memory:
    vector = np.zeros(8, dtype=np.float32)
    vector[0], vector[axis] = cosine, float(np.sqrt(1.0 - cosine**2))
    return Memory.new("ada", content, MemoryType.SEMANTIC, Kind.FACT, now=NOW,
                      embedding=vector, provenance=Provenance(turn_ids=turns))  # fmt: skip


def _pool(
    message: str, *memories: Memory, lexical: list[float], fragments: bool = True
) -> dict[str, tuple[float, float]]:
    """(lexical, relevance) of each memory, ``lexical`` being their BM25 scores."""
    query = np.zeros(8, dtype=np.float32)
    query[0] = 1.0
    dense = [(m, float(np.dot(m.embedding, query))) for m in memories]  # type: ignore[arg-type]
    found = gather(MemoryStore(), "ada", message, query, MemoryFilter(), pool=10, dense=dense,
                   lexical=list(zip(memories, lexical, strict=True)),
                   fragments=fragments)  # fmt: skip
    return {c.memory.content: (c.lexical, c.relevance) for c in found}


def _only_fragments(message: str, content: str) -> bool:
    return fragments_only(content, frozenset(tokenize(message)), written_numbers(message))


def test_numbers_are_read_whole() -> None:
    assert written_numbers("at 24:00:00 on 2026-01-08, build 3.1.2 (1,000 rows), v2") == {
        "24:00:00", "2026-01-08", "3.1.2", "1,000", "2",
    }  # fmt: skip
    assert written_numbers("no digits here") == frozenset()


@pytest.mark.parametrize(
    ("message", "content", "expected"),
    [
        (MESSAGE, DEMOS, True),  # "00" of two different times
        ("We keep getting 3.1.2 rejections", "Apple rejected 3.1.0 under guideline 3.1.2", False),
        ("plan 2.5 with Jonas", "Working on 2.5, targeted for February", False),
        ("the 3.1 build", "version 2.3 is out", True),  # "3" of 3.1 and of 2.3
        (MESSAGE, LIMIT, False),  # "job" is a word: not only fragments
        ("How do I restart nginx?", "Restart nginx with systemctl", False),  # no number
        ("port 8080 or 80?", "The API listens on 8080", False),  # 8080 written in both
    ],
)
def test_a_memory_sharing_only_pieces_of_different_numbers(
    message: str, content: str, expected: bool
) -> None:
    assert _only_fragments(message, content) is expected


def test_pieces_of_different_numbers_give_no_lexical_credit() -> None:
    found = _pool(MESSAGE, _memory(DEMOS, 0.1, 1), _memory(LIMIT, 0.4, 2), lexical=[2.0, 2.0])
    assert found[DEMOS][0] == 0.0
    assert found[LIMIT][0] == 1.0
    # the dense side alone (0.65 × 0.1), over the best blend (0.65 × 0.4 + 0.35 × 1.0);
    # with its match it was (0.065 + 0.35 × 0.5 × 1.0) / 0.61 = 0.39, a bug report's 0.25
    assert found[DEMOS][1] == pytest.approx(0.65 * 0.1 / (0.65 * 0.4 + 0.35))


def test_the_ablation_and_a_conversation_chunk_keep_the_match() -> None:
    assert _pool(MESSAGE, _memory(DEMOS, 0.1, 1), lexical=[2.0], fragments=False)[DEMOS][0] == 1.0
    chunk = _memory(DEMOS, 0.1, 1, turns=("t1",))
    assert _pool(MESSAGE, chunk, lexical=[2.0])[DEMOS][0] == 1.0


def test_a_number_written_the_same_keeps_its_credit() -> None:
    message = "Why was 3.1.2 rejected again?"
    build = "Apple rejected build 3.1.0 on 2026-01-08 under guideline 3.1.2"
    assert _pool(message, _memory(build, 0.3, 1), lexical=[2.0])[build][0] == 1.0


def test_explain_shows_the_match_without_evidence_and_the_memory_stays_out(
    tmp_path: Path,
) -> None:
    """msg-110 of the gating evaluation's held half, in small: "00" of "24:00:00" carried
    the Fridays-at-15:00 demos into a bug report about a job's time limit."""
    message = "slurm killed my TFT job at exactly 24:00:00"
    embedder = PlannedEmbedder([message], {DEMOS: 0.1, LIMIT: 0.2})
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=embedder)
    demos = engine.remember(DEMOS, "ada", "fact", now=NOW).memory_id or ""
    engine.remember("Checkpoints go to /scratch every 30 minutes", "ada", "fact", now=NOW)
    gated = engine.explain(message, "ada", now=NOW)
    assert gated.components[demos]["lexical_no_evidence"] == 1.0
    assert gated.components[demos]["lexical"] == 0.0
    assert demos not in {m.id for m in gated.memories}
    before = engine.explain(message, "ada", now=NOW, options=GateOptions(fragments=False))
    assert "lexical_no_evidence" not in before.components[demos]
    assert demos in {m.id for m in before.memories}  # what the rule keeps out
