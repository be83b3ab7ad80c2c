"""The integer-GEMM MiniLM graph (``embed/minilm/graph-int8.onnx``, issue 18): chosen by the
CPU or by the caller, vectors close to the float graph's and independent of batching."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engrain.config import Settings
from engrain.embed import make_embedder, minilm
from engrain.embed.minilm import MiniLMEmbedder, exact_int8, model_source

from .conftest import EMBED_TEXTS, locomo_turns

TEXTS = EMBED_TEXTS


@pytest.mark.parametrize(
    ("flags", "exact"),
    [
        ("fpu sse2 avx2 avx512f avx512_vnni avx512bw", True),
        ("fpu sse2 avx2 avx_vnni", True),
        ("fpu sse2 avx avx2 fma avx512f avx512bw", False),
        (None, False),
    ],
)
def test_int8_is_chosen_only_where_the_cpus_int8_dot_product_is_exact(
    tmp_path: Path, flags: str | None, exact: bool
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    if flags is not None:
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\n", encoding="utf-8")
    assert exact_int8.__wrapped__(str(cpuinfo)) is exact


def test_the_int8_graph_runs_integer_gemms_on_the_package_weights() -> None:
    model, weights = model_source(int8=True)
    assert isinstance(model, bytes) and weights is not None
    assert b"DynamicQuantizeMatMul" in model and b"MultiHeadAttention" in model
    assert len(model) < 1_000_000  # the graph only: the weights stay in the package's file
    floats, _ = model_source(int8=False)
    assert isinstance(floats, bytes) and b"DynamicQuantizeMatMul" not in floats


def test_a_missing_int8_graph_falls_back_to_the_float_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(minilm, "INT8_GRAPH_FILE", "no-such-graph.onnx")
    model, weights = model_source(int8=True)
    assert isinstance(model, bytes) and weights is not None
    assert b"DynamicQuantizeMatMul" not in model and b"Attention" in model


def test_int8_rows_run_alone_and_the_choice_follows_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert MiniLMEmbedder(int8=True, batch_size=8)._batch_size == 1
    assert MiniLMEmbedder(int8=True, split=True)._batch_size == 1
    assert MiniLMEmbedder(int8=False, split=True)._batch_size == minilm.SPLIT_BATCH_SIZE
    monkeypatch.setattr(minilm, "exact_int8", lambda: False)
    assert MiniLMEmbedder(int8=None)._int8 is False  # None follows the CPU
    monkeypatch.setattr(minilm, "exact_int8", lambda: True)
    assert MiniLMEmbedder(int8=None)._int8 is True
    assert MiniLMEmbedder()._int8 is True  # by default it follows the CPU
    assert make_embedder("minilm")._int8 is True  # type: ignore[attr-defined]
    monkeypatch.setattr(minilm, "exact_int8", lambda: False)
    assert MiniLMEmbedder()._int8 is False
    assert make_embedder("minilm")._int8 is False  # type: ignore[attr-defined]
    assert Settings().onnx_int8 is None
    assert make_embedder("minilm", int8=False)._int8 is False  # type: ignore[attr-defined]


@pytest.mark.model
def test_int8_vectors_do_not_depend_on_the_texts_embedded_with_them() -> None:
    split = MiniLMEmbedder(split=True, int8=True)
    expected = split.embed(TEXTS)
    assert split.graph == "int8"
    pooled = MiniLMEmbedder(threads=2, int8=True).embed(TEXTS[::-1])[::-1]
    alone = np.vstack([MiniLMEmbedder(threads=1, int8=True).embed([t]) for t in TEXTS])
    assert np.abs(pooled - expected).max() <= 1e-6
    assert np.abs(alone - expected).max() <= 1e-6
    assert np.allclose(np.linalg.norm(expected, axis=1), 1.0, atol=1e-5)


def test_the_int8_graph_quantizes_per_token_and_keeps_outlier_channels_in_float() -> None:
    model, _ = model_source(int8=True)
    assert isinstance(model, bytes)
    # every GEMM's rows scaled to one range (per-token quantization) and its widest channels
    # gathered for a float product; attention after the integer Q/K/V GEMM
    assert model.count(b"DynamicQuantizeMatMul") >= 24 and b"ReduceMax" in model
    assert b"MultiHeadAttention" in model and b"QAttention" not in model
    assert b"_outliers" in model and b"gelu_shift" in model


@pytest.mark.model
def test_int8_vectors_stay_close_to_the_float_graphs() -> None:
    int8 = MiniLMEmbedder(split=True, int8=True)
    floats = MiniLMEmbedder(split=True, int8=False)
    cosines = (int8.embed(TEXTS) * floats.embed(TEXTS)).sum(axis=1)
    assert floats.graph == "fused" and int8.graph == "int8"
    assert cosines.min() >= 0.999 and cosines.max() < 0.9999999  # close, and really integer
    turns = locomo_turns(200)
    a, b = int8.embed(turns), floats.embed(turns)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() >= 0.999 and float(np.median(cosines)) >= 0.9998
    # the similarities between texts are the float graph's: the thresholds keep their meaning
    close = np.triu(b @ b.T, 1) > 0.6
    shifts = np.abs((a @ a.T) - (b @ b.T))[close]
    assert close.sum() >= 20 and float(np.percentile(shifts, 95)) <= 0.006


#: The tiers' test project (tests/test_tiers.py) holds three paraphrase pairs, near-duplicates
#: at the 0.85 merge threshold: the float graph puts them at 0.878 / 0.865 / 0.858, the
#: per-tensor int8 graph of the third pass put them at 0.865 / 0.848 / 0.846 (1 merge of 3).
PROJECT_FILE = Path(__file__).parent / "data" / "project_memory.jsonl"


@pytest.mark.model
def test_int8_similarities_of_near_duplicates_match_the_float_graphs() -> None:
    rows = [json.loads(line) for line in PROJECT_FILE.read_text(encoding="utf-8").splitlines()]
    texts = {row["id"]: row["content"] for row in rows}
    pairs = [(texts[i.removesuffix("-dup")], texts[i]) for i in texts if i.endswith("-dup")]
    assert len(pairs) == 3
    int8 = MiniLMEmbedder(int8=True)
    floats = MiniLMEmbedder(int8=False)
    for first, second in pairs:
        f = floats.embed([first, second])
        q = int8.embed([first, second])
        assert float(f[0] @ f[1]) > 0.85
        assert abs(float(q[0] @ q[1]) - float(f[0] @ f[1])) <= 0.004
