"""The PostgreSQL store's BM25 scoring (``bm25.scores(…).best(n)`` and the match count)
answers exactly as the scoring it replaced (``_before`` below, the tree's code until
session 26): the same seqs, the same float32 scores bit for bit, in the same order, the
ties at the ``n``-th place kept, although it ranks only the memories above a floor of the
``n``-th best score, marks no matches when every term score is positive and computes the
term scores in place. The posting lists are built as the store keeps them (blocks packed,
rewritten by ``changed_blocks`` for deleted and rewritten rows, in any order), over a dense
span of seqs and a sparse one (a small user in a large table)."""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain.store.lexical import K1, B
from engrain.store.postgres import bm25, postings
from tests.test_bm25_pruning_bench import (
    WORDS,
    _blocks,
    _corpus,
    _document,
    _rewrite,
    _rows,
    _skewed,
    _zipf_corpus,
)


def _legacy(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows of ``bm25.statistics_sql()`` as the statement returned them before migration
    014: the same postings in legacy blocks, without ``first_seq``."""
    out = []
    for documents, total, term, df, first, data in rows:
        found = postings.unpack([first], [data])
        out.append((documents, total, term, df,
                    postings.legacy_pack(found.seqs, found.tfs, found.lengths)[0]))  # fmt: skip
    return out


def _decode(data: bytes) -> np.ndarray:
    """A legacy block's records (``bm25.decode`` before migration 014)."""
    return np.frombuffer(data, dtype=postings.LEGACY_RECORD)


def _before(terms: Sequence[str], rows: Sequence[Sequence[Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Every match's seq and score, as ``bm25.scores`` computed them before (verbatim, on
    the legacy blocks: :func:`_legacy`)."""
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    documents, total = int(rows[0][0]), int(rows[0][1])
    parts: dict[str, list[bytes]] = defaultdict(list)
    frequency: dict[str, int] = {}
    for row in rows:
        parts[row[2]].append(row[4])
        frequency[row[2]] = int(row[3])
    lists = [(t, _decode(b"".join(parts[t]))) for t in terms if t in parts]
    seqs = [p["seq"].astype(np.int64) for _, p in lists]
    if not seqs or not sum(len(s) for s in seqs):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    every = np.concatenate(seqs)
    low, high = int(every.min()), int(every.max())
    if high - low < max(bm25.DENSE_SPAN, 4 * len(every)):
        numbers, size, to_seq = [s - low for s in seqs], high - low + 1, lambda i: i + low
    else:
        known, inverse = np.unique(every, return_inverse=True)
        bounds = np.cumsum([0, *(len(s) for s in seqs)])
        numbers = [inverse[a:b] for a, b in itertools.pairwise(bounds)]
        size, to_seq = len(known), lambda i: known[i]
    out = np.zeros(size, dtype=np.float32)
    touched = np.zeros(size, dtype=bool)
    average = np.float32(total) / np.float32(documents)
    for (term, found), docs in zip(lists, numbers, strict=True):
        df = frequency[term]
        idf = math.log(1.0 + (documents - df + 0.5) / (df + 0.5))
        tfs = found["tf"].astype(np.float32)
        norm = K1 * (1.0 - B + B * found["length"].astype(np.float32) / average)
        out[docs] += idf * tfs * (K1 + 1.0) / (tfs + norm)
        touched[docs] = True
    hits = np.flatnonzero(touched)
    return to_seq(hits), out[hits]


def _best_before(seqs: np.ndarray, scores: np.ndarray, n: int) -> dict[int, float]:
    if len(scores) > n:
        cut = np.partition(scores, len(scores) - n)[len(scores) - n]
        picked = np.flatnonzero(scores >= cut)
    else:
        picked = np.arange(len(scores))
    return dict(zip(seqs[picked].tolist(), scores[picked].tolist(), strict=True))


def _check(terms: list[str], rows: list[tuple[Any, ...]], n: int) -> None:
    seqs, scores = _before(terms, _legacy(rows))
    want = _best_before(seqs, scores, n)
    scored = bm25.scores(terms, rows)
    got = scored.best(n)
    assert list(got.items()) == list(want.items())
    bits = [np.asarray(list(x.values()), dtype=np.float32).view(np.int32) for x in (got, want)]
    assert np.array_equal(*bits)
    assert len(scored) == len(scores)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 100_000),
    size=st.integers(1, 500),
    vocabulary=st.integers(1, len(WORDS)),
    block=st.sampled_from([1, 3, 16, bm25.BLOCK]),
    n=st.integers(1, 80),
    ties=st.booleans(),
    query=st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=6),
    edits=st.integers(0, 40),
    sparse=st.booleans(),
)
def test_the_best_equal_the_scoring_before(
    seed: int, size: int, vocabulary: int, block: int, n: int, ties: bool,
    query: list[int], edits: int, sparse: bool,
) -> None:  # fmt: skip
    rng = random.Random(seed)
    docs = _corpus(seed, size, vocabulary, ties)
    if sparse:  # a small user's rows among millions of others': ranks, not offsets
        docs = {seq * 50_000 + rng.randint(0, 9): words for seq, words in docs.items()}
    blocks = _blocks(docs, block)
    victims = rng.sample(sorted(docs), min(edits, len(docs) - 1))
    rewritten = {s: _document(rng, vocabulary) for s in victims if rng.random() < 0.5}
    _rewrite(blocks, docs, {s: docs[s] for s in victims}, rewritten)
    terms = sorted({WORDS[i] for i in query})
    _check(terms, _rows(blocks, docs, terms, rng), n)


def test_the_best_on_zipf_corpora_and_a_term_in_every_memory() -> None:
    rng = random.Random(26)
    for _ in range(40):
        docs = _zipf_corpus(rng, rng.choice([200, 1500]))
        blocks = _blocks(docs, rng.choice([4, bm25.BLOCK]))
        terms = sorted({f"z{rng.randint(0, 4)}", f"z{rng.randint(5, 299)}"})
        for n in (1, 10, 100, 10_000):
            _check(terms, _rows(blocks, docs, terms, rng), n)
    docs, terms = _skewed(1)  # "common" is in every memory
    for n in (1, 5, 100, 3000, 4000):
        _check(terms, _rows(_blocks(docs, bm25.BLOCK), docs, terms, rng), n)
        _check(["common"], _rows(_blocks(docs, bm25.BLOCK), docs, ["common"], rng), n)


@pytest.mark.parametrize("n", [1, 3, 389, 390, 391])
def test_every_memory_tied(n: int) -> None:
    docs = {seq: ["same", "words", "here"] for seq in range(10, 400)}
    rows = _rows(_blocks(docs, 16), docs, ["here", "same"], random.Random(n))
    _check(["here", "same"], rows, n)
    assert len(bm25.scores(["here", "same"], rows).best(n)) == 390


def test_a_posting_of_zero_frequency_still_matches() -> None:
    # The writes never store one, but the count of matches and the best must not depend on
    # a term score being positive: a memory whose only posting scores 0 is a match.
    docs = {seq: ["alpha"] * (1 + seq % 3) for seq in range(1, 200)}
    blocks = _blocks(docs, bm25.BLOCK)
    zero = bm25.encode(np.asarray([500, 501]), np.asarray([0, 0]), np.asarray([4, 4]))
    blocks["beta"] = [(500, zero)]
    rows = _rows(blocks, docs, ["alpha"], random.Random(1))
    rows += [(len(docs), rows[0][1], "beta", 2, 500, zero)]
    for n in (1, 10, 199, 200, 201, 500):
        _check(["alpha", "beta"], rows, n)
    assert len(bm25.scores(["alpha", "beta"], rows)) == 201


def test_only_the_memories_above_a_floor_are_ranked(monkeypatch: pytest.MonkeyPatch) -> None:
    # 3,000 memories match (a term in every one), 30 hold the rare term: the 5 best are
    # found ranking ~30 scores, not 3,000 (the rare list's 5th best is the floor).
    docs, terms = _skewed(2)
    rows = _rows(_blocks(docs, bm25.BLOCK), docs, terms, random.Random(2))
    ranked: list[int] = []
    partition = np.partition

    def spy(a: Any, kth: Any, *args: Any, **kwargs: Any) -> Any:
        ranked.append(len(a))
        return partition(a, kth, *args, **kwargs)

    scored = bm25.scores(terms, rows)
    monkeypatch.setattr(np, "partition", spy)
    best = scored.best(5)
    monkeypatch.undo()
    assert len(scored) == 3000
    assert max(ranked) < 100, ranked
    _check(terms, rows, 5)
    assert len(best) >= 5


def test_each_terms_scores_are_added_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    # ``out[docs] += weight`` gathers a term's memories' scores into a temporary, adds and
    # scatters them back (three passes over a list that holds ~100,000 postings a term at
    # a million memories); ``np.add.at`` adds in place, in one: the same float32 additions
    # in the same term order, so the same bits (_check), at about half the CPU.
    docs, terms = _skewed(2)
    rows = _rows(_blocks(docs, bm25.BLOCK), docs, terms, random.Random(2))
    added: list[int] = []
    add_at = np.add.at

    def spy(a: Any, indices: Any, b: Any) -> None:
        added.append(len(indices))
        add_at(a, indices, b)

    monkeypatch.setattr(np.add, "at", spy, raising=False)
    scored = bm25.scores(terms, rows)
    monkeypatch.undo()
    lists = {t: sum(len(postings.unpack([r[4]], [r[5]])) for r in rows if r[2] == t) for t in terms}
    assert added == [lists[t] for t in terms if lists[t]]
    assert len(scored) == 3000
    _check(terms, rows, 5)
