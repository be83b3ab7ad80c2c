"""The learned reading of short replies (``engrain.recall.acknowledgement``, issue 12): it is
asked only about short discussions, reads acknowledgements no word list holds as trivial,
leaves short real answers alone, and through the gate gives them no memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engrain import Engine
from engrain.embed.minilm import MODEL_ID
from engrain.errors import ConfigError
from engrain.recall import acknowledgement as ack
from engrain.recall import intent_model as im
from engrain.recall.classify import Complexity, classify
from engrain.store import MemoryStore

from .conftest import NOW, make_settings


def test_the_shipped_model_reads_minilm_vectors_and_these_features() -> None:
    model = ack.load()
    assert model is not None
    assert model.embedder == MODEL_ID
    row = ack.features("superb", np.zeros(384))
    assert model.mean.shape == model.scale.shape == model.weights.shape == row.shape


@pytest.mark.parametrize(
    ("message", "asked"),
    [("superb", True), ("tip top 🙌", True), ("hi there, champion", True),
     ("superb?", False),  # a question
     ("option 2", False),  # a number
     ("use `uv`", False),  # code
     ("make it async", False),  # a request: generation
     ("the nightly job hangs", False),  # a problem: debugging
     ("x" * 60, False),  # long
     ("thanks!", False)],  # trivial by the rules already
)  # fmt: skip
def test_only_short_discussions_and_greetings_are_asked(message: str, asked: bool) -> None:
    assert ack.eligible(classify(message), message) is asked


def test_another_embedder_another_width_or_a_missing_model_keep_the_rules(tmp_path: Path) -> None:
    rules = classify("superb")
    assert ack.refine(rules, "superb", np.ones(384), "hash-384") is rules
    assert ack.refine(rules, "superb", np.ones(10), MODEL_ID) is rules
    assert ack.load(tmp_path / "none.npz") is None
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ConfigError):
        ack.load(bad)


def test_probability_is_the_logistic_of_the_standardised_row() -> None:
    model = ack.AckModel("m", np.zeros(2), np.ones(2), np.array([1.0, -1.0]), 0.5)
    assert ack.probability(model, np.array([2.0, 1.0])) == pytest.approx(1 / (1 + np.exp(-1.5)))


@pytest.mark.model
@pytest.mark.parametrize("message", ["righto", "tip top", "superb", "champion"])
def test_acknowledgements_no_list_holds_become_trivial(minilm, message: str) -> None:  # type: ignore[no-untyped-def]
    rules = classify(message)
    assert rules.complexity is not Complexity.TRIVIAL
    read = im.refine(rules, message, minilm.embed([message])[0], MODEL_ID)
    assert read.complexity is Complexity.TRIVIAL
    assert any(s.startswith("model: acknowledgement p=") for s in read.signals)


@pytest.mark.model
@pytest.mark.parametrize(
    "message", ["redis instead", "option two", "use postgres", "same for staging", "staging first"]
)
def test_short_real_answers_stay_real(minilm, message: str) -> None:  # type: ignore[no-untyped-def]
    rules = classify(message)
    assert im.refine(rules, message, minilm.embed([message])[0], MODEL_ID).complexity is not (
        Complexity.TRIVIAL
    )


@pytest.mark.model
def test_the_gate_gives_an_acknowledgement_no_memory_even_with_a_budget(  # type: ignore[no-untyped-def]
    minilm, tmp_path: Path
) -> None:
    engine = Engine(
        settings=make_settings(tmp_path, embedder="minilm"), store=MemoryStore(), embedder=minilm
    )
    engine.remember("Superb coffee is served in the kitchen on Fridays", "ada", now=NOW)
    got = engine.explain("superb", "ada", now=NOW)
    assert got.classification.complexity is Complexity.TRIVIAL
    assert got.selected == []
    assert engine.context("superb", "ada", token_budget=2000, now=NOW).text == ""
    assert engine.context("Where is superb coffee served?", "ada", now=NOW).text != ""
