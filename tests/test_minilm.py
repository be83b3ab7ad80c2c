"""The real all-MiniLM-L6-v2 model and the real tokenizer, offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engrain import Engine
from engrain.embed import CachedEmbedder
from engrain.store import MemoryStore
from engrain.tokens import count_tokens

from .conftest import NOW, make_settings

pytestmark = pytest.mark.model


def test_vectors_are_384_unit_rows_in_input_order(minilm) -> None:  # type: ignore[no-untyped-def]
    texts = ["a short one", "a considerably longer sentence about databases and indexes", "x"]
    batch = minilm.embed(texts)
    assert batch.shape == (3, 384) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    for i, text in enumerate(texts):  # batching and length-sorting do not change a vector
        assert np.allclose(minilm.embed([text])[0], batch[i], atol=1e-4)


def test_similar_meanings_are_closer(minilm) -> None:  # type: ignore[no-untyped-def]
    a, b, c = minilm.embed(
        ["The cat sleeps on the sofa", "A kitten naps on the couch", "Quarterly tax filing"]
    )
    assert float(a @ b) > float(a @ c) + 0.3


def test_embedding_cache_embeds_identical_text_once(minilm) -> None:  # type: ignore[no-untyped-def]
    store = MemoryStore()
    cached = CachedEmbedder(minilm, store)
    before = minilm.texts_embedded
    cached.embed(["same text", "same text", "other text"])
    cached.embed(["same text"])
    assert minilm.texts_embedded - before == 2


def test_token_counts_are_cl100k() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens("") == 0
    assert count_tokens("<|endoftext|>") > 1  # special tokens are counted as text


def test_engine_with_real_model_recalls_by_meaning(minilm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(tmp_path, embedder="minilm")
    engine = Engine(settings=settings, store=MemoryStore(), embedder=minilm)
    engine.remember("Ada's cat is called Turing", "ada", now=NOW)
    engine.remember("The invoices table is partitioned by month", "ada", now=NOW)
    top = engine.recall("what is the name of my pet?", "ada", top_k=1).memories[0]
    assert "Turing" in top.content


def test_repeated_queries_are_embedded_once(minilm) -> None:  # type: ignore[no-untyped-def]
    cached = CachedEmbedder(minilm, MemoryStore(), queries=2)
    before = minilm.texts_embedded
    first = cached.embed_query("which port?")
    assert np.array_equal(cached.embed_query("which port?"), first)
    cached.embed_query("b")
    cached.embed_query("c")  # evicts "which port?"
    cached.embed_query("which port?")
    assert minilm.texts_embedded - before == 4


@pytest.mark.model
def test_spinning_is_an_onnxruntime_session_option() -> None:
    from engrain.embed.minilm import MiniLMEmbedder

    quiet = MiniLMEmbedder(threads=2, spinning=False)  # spinning concerns an intra-op pool
    quiet.load()
    options = quiet._session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    default = MiniLMEmbedder(threads=2)
    default.load()
    with pytest.raises(Exception, match="does not have configuration"):  # the default: spin
        default._session.get_session_options().get_session_config_entry(
            "session.intra_op.allow_spinning"
        )
    # ... for at most SPIN_DURATION_US once idle, so a context()'s overlapped reads get the
    # second core after the query's embedding (docs/scale.md, session 19)
    spun = default._session.get_session_options()
    assert spun.get_session_config_entry("session.intra_op.spin_duration_us") == "1000"
    with pytest.raises(Exception, match="does not have configuration"):  # nothing spins
        options.get_session_config_entry("session.intra_op.spin_duration_us")
    np.testing.assert_allclose(quiet.embed(["same text"]), default.embed(["same text"]))


def test_onnx_spinning_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from engrain.config import load_settings

    monkeypatch.setenv("ENGRAIN_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("ENGRAIN_ONNX_SPINNING", raising=False)
    assert load_settings({}).onnx_spinning is None  # on, unless the store reads concurrently
    monkeypatch.setenv("ENGRAIN_ONNX_SPINNING", "false")
    assert load_settings({}).onnx_spinning is False


def test_unset_spinning_is_on_unless_the_store_reads_concurrently(tmp_path: Path) -> None:
    """``onnx_spinning`` unset: the model's threads spin for an embedded store, not over one
    that reads in threads of its own (PostgreSQL); a value set by the user always wins."""
    from engrain.config import load_settings
    from engrain.engine import _model_spinning
    from engrain.store import MemoryStore

    class Concurrent(MemoryStore):
        concurrent_reads = True

    unset = load_settings({"data_dir": tmp_path}, environ={})
    assert _model_spinning(unset, MemoryStore()) is True
    assert _model_spinning(unset, Concurrent()) is False
    for value in (True, False):
        chosen = load_settings({"data_dir": tmp_path, "onnx_spinning": value}, environ={})
        assert _model_spinning(chosen, Concurrent()) is value
        assert _model_spinning(chosen, MemoryStore()) is value


def test_the_fast_batch_encoding_gives_the_ids_of_the_full_one(minilm) -> None:  # type: ignore[no-untyped-def]
    from engrain.embed.minilm import _encode_batch

    minilm.load()
    tokenizer = minilm._tokenizer
    texts = ["Caroline: I went to the LGBTQ support group yesterday!", "x", "",
             "naïve café — 漢字 " * 80, "snake_case --flag main.py"]  # fmt: skip
    fast = _encode_batch(tokenizer, texts)
    assert [e.ids for e in fast] == [e.ids for e in tokenizer.encode_batch(texts)]
    assert max(len(e.ids) for e in fast) == 256  # truncation applies to the fast path too

    class Plain:  # a tokenizers release without encode_batch_fast
        encode_batch = tokenizer.encode_batch

    assert [e.ids for e in _encode_batch(Plain(), texts)] == [e.ids for e in fast]
