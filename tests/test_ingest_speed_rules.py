"""How the MiniLM embedder splits an ingest's texts over the cores, and that the split
never changes a vector (docs/ingest.md)."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from engrain import Engine, Settings
from engrain.embed.minilm import BATCH_SIZE, SPLIT_BATCH_SIZE, MiniLMEmbedder, split_sorted
from engrain.store import MemoryStore


@pytest.mark.parametrize("count", [1, 2, 3, 7, 10, 31, 32, 33, 64, 65, 200])
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_groups_cover_the_rows_in_order_and_keep_every_worker_busy(
    count: int, workers: int
) -> None:
    rng = random.Random(count * 10 + workers)
    lengths = [rng.randint(5, 256) for _ in range(count)]
    order = sorted(range(count), key=lambda i: lengths[i])
    groups = split_sorted(order, lengths, workers, batch_size=32)
    assert [i for g in groups for i in g] == order  # consecutive, nothing lost or repeated
    assert all(0 < len(g) <= 32 for g in groups)
    assert len(groups) >= min(workers, count)  # a 10-text session call uses both cores


def test_groups_share_the_tokens_not_the_rows() -> None:
    lengths = [10] * 8 + [200, 210]  # eight short turns and two long ones
    order = list(range(10))
    first, second = split_sorted(order, lengths, workers=2, batch_size=32)
    assert first == list(range(9)) and second == [9]  # 280 tokens against 210, not 5 rows each
    assert split_sorted(order, [50] * 10, workers=2, batch_size=32) == [order[:5], order[5:]]


@pytest.mark.model
def test_parallel_groups_give_the_vectors_of_one_thread() -> None:
    texts = [
        "ada: I moved to Lisbon last spring and I love the light there",
        "bob: ok",
        "ada: my sister is a nurse, she works nights at the children's hospital",
        "bob: Did you finish the marathon training plan we talked about in March?",
        "ada: yes",
        "bob: The database migration failed twice because of a lock timeout on the users table",
        "ada: " + "a much longer turn about gardening and tomatoes " * 12,
    ]
    serial = MiniLMEmbedder(threads=1)  # one thread, batches one after the other
    pooled = MiniLMEmbedder(threads=2)  # two intra-op threads, batches one after the other
    split = MiniLMEmbedder(split=True)  # groups side by side, one per core
    expected = serial.embed(texts)
    assert np.abs(split.embed(texts) - expected).max() <= 1e-6
    if (os.cpu_count() or 1) > 1:
        assert split._pool is not None  # the call was split over the cores
    assert np.abs(pooled.embed(texts) - expected).max() <= 1e-6
    alone = np.vstack([split.embed([t]) for t in texts])  # the query path
    assert np.abs(alone - expected).max() <= 1e-6


@pytest.mark.model
def test_calls_from_many_threads_run_together_and_give_each_its_own_vectors() -> None:
    texts = [f"question {i}: where did ada spend the summer of {2000 + i}?" for i in range(24)]
    embedder = MiniLMEmbedder(split=True)  # no lock while the model runs
    expected = MiniLMEmbedder(threads=1).embed(texts)
    calls: list[list[str]] = [[t] for t in texts] + [texts[:7], texts[7:]]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(embedder.embed, calls))
    for batch, got in zip(calls, results, strict=True):
        rows = [texts.index(t) for t in batch]
        assert np.abs(got - expected[rows]).max() <= 1e-6
    assert embedder.calls == len(calls) and embedder.texts_embedded == 2 * len(texts)


def _embed_in_child(embedder: MiniLMEmbedder, texts: list[str], expected: object) -> None:
    got = embedder.embed(texts)
    os._exit(0 if np.abs(got - expected).max() <= 1e-6 else 1)


@pytest.mark.model
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_splits_calls_on_its_own_threads() -> None:
    import multiprocessing

    texts = ["ada: I moved to Lisbon", "bob: how is the light there?", "ada: golden, always"]
    embedder = MiniLMEmbedder(split=True)
    expected = embedder.embed(texts)  # the parent's worker threads exist now
    child = multiprocessing.get_context("fork").Process(
        target=_embed_in_child, args=(embedder, texts, expected)
    )
    child.start()
    child.join(60)  # a guard against a hang, not a timing: the child's threads are new
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung on the parent's worker threads")
    assert child.exitcode == 0


@pytest.mark.parametrize("split", [False, True])
def test_the_onnx_split_setting_picks_the_embedders_mode(tmp_path: Path, split: bool) -> None:
    settings = Settings(data_dir=tmp_path, onnx_split=split)
    with Engine(settings=settings, store=MemoryStore()) as engine:
        inner = engine.embedder.inner  # type: ignore[attr-defined]
        assert isinstance(inner, MiniLMEmbedder)
        assert inner._split is split
        assert inner._batch_size == (
            1 if inner._int8 else SPLIT_BATCH_SIZE if split else BATCH_SIZE
        )


@pytest.mark.parametrize("int8", [False, True])
def test_the_onnx_int8_setting_picks_the_graph(tmp_path: Path, int8: bool) -> None:
    settings = Settings(data_dir=tmp_path, onnx_int8=int8)
    with Engine(settings=settings, store=MemoryStore()) as engine:
        inner = engine.embedder.inner  # type: ignore[attr-defined]
        assert isinstance(inner, MiniLMEmbedder)
        assert inner._int8 is int8


def test_the_onnx_int8_setting_follows_the_cpu_by_default(tmp_path: Path) -> None:
    from engrain.embed.minilm import exact_int8

    assert Settings(data_dir=tmp_path).onnx_int8 is None
    with Engine(settings=Settings(data_dir=tmp_path), store=MemoryStore()) as e:
        assert e.embedder.inner._int8 is exact_int8()  # type: ignore[attr-defined]


@pytest.mark.parametrize(("raw", "value"), [("false", False), ("1", True)])
def test_the_onnx_int8_setting_reads_the_environment(tmp_path: Path, raw: str, value: bool) -> None:
    from engrain.config import load_settings

    settings = load_settings({"data_dir": tmp_path}, environ={"ENGRAIN_ONNX_INT8": raw})
    assert settings.onnx_int8 is value
