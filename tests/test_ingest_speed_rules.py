"""How the MiniLM embedder splits an ingest's texts over the cores, and that the split
never changes a vector (docs/ingest.md)."""

from __future__ import annotations

import numpy as np
import pytest

from engrain.embed.minilm import MiniLMEmbedder, split_sorted


@pytest.mark.parametrize("count", [1, 2, 3, 7, 10, 31, 32, 33, 64, 65, 200])
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_groups_cover_the_rows_in_order_and_keep_every_worker_busy(
    count: int, workers: int
) -> None:
    order = list(range(100, 100 + count))[::-1]  # any permutation: the split keeps its order
    groups = split_sorted(order, workers, batch_size=32)
    assert [i for g in groups for i in g] == order  # consecutive, nothing lost or repeated
    assert all(0 < len(g) <= 32 for g in groups)
    assert len(groups) >= min(workers, count)  # a 10-text session call uses both cores
    assert max(map(len, groups)) - min(map(len, groups)) <= 1  # near-equal work


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
    serial = MiniLMEmbedder(threads=1)  # one worker: every batch on the intra-op session
    parallel = MiniLMEmbedder(threads=2)
    expected = serial.embed(texts)
    got = parallel.embed(texts)
    assert parallel._bulk is not None  # the multi-text path ran
    assert np.abs(got - expected).max() <= 1e-6
    alone = np.vstack([parallel.embed([t]) for t in texts])  # the query path
    assert np.abs(alone - expected).max() <= 1e-6
