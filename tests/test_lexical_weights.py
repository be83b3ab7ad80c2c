"""A long posting list's BM25 weights kept by its index (issue 18,
``store/lexical_weights.py``): the scores and the top k are those of computing every
weight at every query, bit for bit; an index made by a write keeps none of the old one's
(its size and mean length differ); and the kept weights stay within their byte budget,
least recently used dropped first."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from engrain.store import lexical_weights
from engrain.store.lexical import LexicalIndex
from engrain.store.lexical_weights import KeptWeights

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
QUERIES = ["alpha beta", "gamma delta alpha", "zeta", "theta eta epsilon alpha", "absent"]


def _corpus(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 3, 6, 12])))
            for _ in range(n)]  # fmt: skip


def _answers(index: LexicalIndex) -> list[tuple[bytes, bytes, bytes]]:
    out = []
    for query in QUERIES:
        rows, scores = index.top(query, 25)
        out.append((index.scores(query).tobytes(), rows.tobytes(), scores.tobytes()))
    return out


@pytest.fixture
def keep_every_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every list counts as long (the corpus here has no list of 65,536 documents)."""
    monkeypatch.setattr(lexical_weights, "MIN_POSTINGS", 1)


def test_kept_weights_give_the_same_scores_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    documents = _corpus(1, 400)
    monkeypatch.setattr(lexical_weights, "MIN_POSTINGS", 10**9)
    plain = LexicalIndex(documents)
    want = _answers(plain)
    assert len(plain._weights) == 0
    monkeypatch.setattr(lexical_weights, "MIN_POSTINGS", 1)
    kept = LexicalIndex(documents)
    first = _answers(kept)  # computes and keeps the weights
    assert len(kept._weights) == len(WORDS)
    assert _answers(kept) == first == want  # served from the kept weights


def test_only_long_lists_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    documents = ["alpha beta"] * 50 + ["alpha gamma"] * 5
    monkeypatch.setattr(lexical_weights, "MIN_POSTINGS", 50)
    index = LexicalIndex(documents)
    index.top("alpha beta gamma", 10)
    assert index._weights.get("alpha") is not None  # 55 documents
    assert index._weights.get("beta") is not None  # 50
    assert index._weights.get("gamma") is None  # 5


@pytest.mark.usefixtures("keep_every_list")
def test_an_index_made_by_a_write_starts_without_the_old_weights() -> None:
    documents = _corpus(2, 300)
    more = _corpus(3, 60)
    old = LexicalIndex(documents)
    _answers(old)
    grown = old.extended(more)
    assert len(grown._weights) == 0
    assert _answers(grown) == _answers(LexicalIndex(documents + more))
    keep = np.asarray([i % 3 != 0 for i in range(len(documents))])
    shrunk = old.without(keep)
    assert len(shrunk._weights) == 0
    assert _answers(shrunk) == _answers(
        LexicalIndex([d for d, k in zip(documents, keep.tolist(), strict=True) if k])
    )
    changed = old.replaced({0: (documents[0], "alpha alpha alpha"), 5: (documents[5], "zeta")})
    edited = list(documents)
    edited[0], edited[5] = "alpha alpha alpha", "zeta"
    assert _answers(changed) == _answers(LexicalIndex(edited))
    restored = LexicalIndex.from_arrays(old.to_arrays())
    assert len(restored._weights) == 0
    assert _answers(restored) == _answers(old)


@pytest.mark.usefixtures("keep_every_list")
def test_threads_sharing_an_index_get_the_same_answers() -> None:
    documents = _corpus(4, 500)
    want = _answers(LexicalIndex(documents))
    shared = LexicalIndex(documents)
    got: list[list[tuple[bytes, bytes, bytes]]] = []
    barrier = threading.Barrier(4)

    def ask() -> None:
        barrier.wait()
        got.append(_answers(shared))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == [want] * 4


def _weights(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float32)


def test_the_budget_drops_the_least_recently_used_first() -> None:
    kept = KeptWeights(max_bytes=4 * 30)
    kept.keep("a", _weights(10))
    kept.keep("b", _weights(10))
    kept.keep("c", _weights(10))
    assert kept.nbytes == 120
    assert kept.get("a") is not None  # now the most recently used
    kept.keep("d", _weights(10))
    assert kept.get("b") is None  # dropped: the least recently used
    assert [t for t in "acd" if kept.get(t) is not None] == ["a", "c", "d"]
    assert kept.nbytes == 120
    kept.keep("e", _weights(25))  # needs 100 bytes: three dropped
    assert len(kept) == 1 and kept.nbytes == 100
    kept.keep("huge", _weights(31))  # more than the whole budget: not kept
    assert kept.get("huge") is None and kept.get("e") is not None


def test_kept_weights_are_read_only_and_kept_once() -> None:
    kept = KeptWeights(max_bytes=1_000)
    first = _weights(10)
    kept.keep("a", first)
    kept.keep("a", _weights(10) + 1)
    assert kept.get("a") is first and kept.nbytes == 40
    with pytest.raises(ValueError):
        first[0] = 1.0
