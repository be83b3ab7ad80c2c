"""``bench/block_contents.py`` on hand-made blocks: why an injected line passed, the
restatements the sets' README declares, and a set's tokens summed by label and reason."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import block_contents as bc  # noqa: E402

from engrain.model import Kind, MemoryType  # noqa: E402
from engrain.recall.classify import Intent  # noqa: E402


def test_declared_restatements_are_read_from_the_readme() -> None:
    text = (
        "5 restatements (`hb-pat-09` restates `hb-inv-01`, `hb-inv-09` (an invariant) "
        "restates `hb-pat-04` (a pattern), `qu-inv-09` restates part of `qu-pat-04`)"
    )
    assert bc.declared_pairs(text) == {
        frozenset({"hb-pat-09", "hb-inv-01"}), frozenset({"hb-inv-09", "hb-pat-04"}),
        frozenset({"qu-inv-09", "qu-pat-04"}),
    }  # fmt: skip
    # the evaluation's own README declares some
    assert bc.declared_pairs(bc.README.read_text(encoding="utf-8"))


def test_why_a_line_passed() -> None:
    fact, q = MemoryType.SEMANTIC, Intent.QUESTION
    assert bc.why_passed("pinned", Kind.FACT, fact, {}, 0.1, q, 0.0) == "pinned"
    assert bc.why_passed("conflicts with x", Kind.FACT, fact, {}, 0.1, q, 0.0) == "partner"
    assert bc.why_passed("procedural, relevance 0.5", Kind.PREFERENCE, MemoryType.PROCEDURAL,
                         {}, 0.3, q, 0.0) == "procedural"  # fmt: skip
    assert bc.why_passed("selected", Kind.INVARIANT, fact,
                         {"calibrated_relevance": 0.1}, 0.3, q, 0.0) == "background"  # fmt: skip
    # a golden path at 0.40 with 0.10 of boost against a question's 0.35: the boost carries it
    terms = {"calibrated_relevance": 0.3, "type_boost": 0.10}
    assert bc.why_passed("selected", Kind.GOLDEN_PATH, fact, terms, 0.40, q, 0.0) == "boost"
    assert bc.why_passed("selected", Kind.GOLDEN_PATH, fact, terms, 0.50, q, 0.0) == "relevance"


def _line(label: str, tokens: int, why: str = "relevance", cosine: float = 0.0,
          declared: bool = False, relevance: float = 0.5) -> dict[str, Any]:  # fmt: skip
    return {
        "id": f"{label}{tokens}", "kind": "fact", "tokens": tokens, "label": label, "why": why,
        "relevance": relevance, "ratio": relevance, "score": 0.5, "threshold": 0.35,
        "nearest_cosine": cosine, "declared_restatement": declared,
    }  # fmt: skip


def test_a_sets_tokens_are_split_by_label_reason_and_overhead() -> None:
    blocks = [
        {"id": "m1", "intent": "question", "tokens": 106, "overhead": 6, "lines": [
            _line("include", 40), _line("none", 30, "pinned"),
            _line("none", 30, "background", cosine=0.85)]},
        {"id": "m2", "intent": "debugging", "tokens": 56, "overhead": 6, "lines": [
            _line("exclude", 20), _line("none", 30, declared=True, relevance=0.25)]},
    ]  # fmt: skip
    s = bc.summary(blocks)
    assert s["tokens"] == 81.0 and s["overhead"] == 6.0
    assert s["by_label"] == {"include": 20.0, "none": 45.0, "exclude": 10.0}
    assert s["unlabelled_by_why"]["pinned"] == 15.0
    assert s["unlabelled_by_why"]["background"] == 15.0
    assert s["restating"]["none tokens"] == 15.0 and s["restating"]["none lines"] == 1
    assert s["restating"]["declared none lines"] == 1
    pooled = bc.pooled(blocks)
    assert pooled["background_intent"] == {
        "question": {"include": 0, "exclude": 0, "unlabelled": 1, "unlabelled_tokens": 30}
    }
    assert pooled["pinned"]["clears its threshold"]["unlabelled"] == 1
