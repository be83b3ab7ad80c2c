"""The fused all-MiniLM-L6-v2 graph (``embed/minilm/graph.onnx``, issue 18): same vectors as
the package's plain model, weights read from the package's file, a safe fallback."""

from __future__ import annotations

import numpy as np
import pytest

from engrain.embed import minilm
from engrain.embed.minilm import MiniLMEmbedder, model_source

from .conftest import EMBED_TEXTS, locomo_turns

TEXTS = EMBED_TEXTS


def test_the_fused_graph_is_used_and_keeps_its_weights_in_the_package_file() -> None:
    model, weights = model_source()
    assert isinstance(model, bytes) and weights is not None
    assert (weights / "model.onnx").stat().st_size == minilm.WEIGHTS_SIZE
    assert len(model) < 1_000_000  # the graph only: the 23 MB of weights stay where they are


@pytest.mark.parametrize("int8", [False, True])
def test_the_graphs_normalise_the_residuals_without_the_slow_fused_kernel(int8: bool) -> None:
    # onnxruntime's CPU SkipLayerNormalization took ~5x the Add + LayerNormalization it
    # fuses (~15% of the int8 graph's time, docs/ingest.md "Session 10"): the build script
    # unfuses the optimiser's fusion, 12 residual norms and the embeddings' one
    model, _ = model_source(int8=int8)
    assert isinstance(model, bytes)
    assert b"SkipLayerNorm" not in model
    assert model.count(b"LayerNormalization") == 13


def test_a_package_file_that_is_not_the_one_the_graph_was_built_against_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(minilm, "WEIGHTS_SHA256", "0" * 64)
    minilm._weights_match.cache_clear()
    try:
        model, weights = model_source()
        assert isinstance(model, str) and model.endswith("model.onnx") and weights is None
    finally:
        minilm._weights_match.cache_clear()
    model, weights = model_source(fused=False)
    assert isinstance(model, str) and weights is None


@pytest.mark.model
@pytest.mark.parametrize("split", [False, True])
def test_the_fused_graph_gives_the_plain_models_vectors(split: bool) -> None:
    fused = MiniLMEmbedder(split=split, int8=False).embed(TEXTS)
    plain = MiniLMEmbedder(split=split, fused=False).embed(TEXTS)
    cosines = (fused * plain).sum(axis=1)
    assert cosines.min() >= 0.99999
    assert np.abs(fused - plain).max() <= 1e-5
    one = np.vstack([MiniLMEmbedder(threads=1, int8=False).embed([t]) for t in TEXTS])  # no padding
    assert np.abs(one - plain).max() <= 1e-5


@pytest.mark.model
def test_the_fused_graph_gives_the_plain_models_vectors_on_locomo_turns() -> None:
    turns = locomo_turns(200)
    fused = MiniLMEmbedder(split=True, int8=False).embed(turns)
    plain = MiniLMEmbedder(split=True, fused=False).embed(turns)
    assert (fused * plain).sum(axis=1).min() >= 0.9999
