"""``bench/bm25_pruning.py``'s BM25 top-k with dynamic pruning (``pruned``, MaxScore over
the PostgreSQL store's fetched posting lists) is exact: ``Lists.best(n)`` returns the store's
``bm25.scores(…).best(n)`` — the same seqs, the same float32 scores bit for bit, the same
order, the ties at the ``n``-th place kept — while computing the term scores of fewer
postings, so what the bench measures it saving is a saving of the same answer. The posting
lists are built as the store keeps them: blocks packed, then rewritten by
``changed_blocks`` for deleted and rewritten rows, and handed over in any order."""

from __future__ import annotations

import random
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain.store.postgres import bm25

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bm25_pruning as pruning

#: A vocabulary whose first words are common and last words rare (drawn by rank).
WORDS = [f"w{i}" for i in range(40)]


def _document(rng: random.Random, vocabulary: int) -> list[str]:
    size = rng.choice([1, 2, 3, 5, 8, 13, 30])
    return [WORDS[min(int(rng.paretovariate(1.0)) - 1, vocabulary - 1)] for _ in range(size)]


def _blocks(docs: dict[int, list[str]], block: int) -> dict[str, list[tuple[int, bytes]]]:
    """Each term's blocks ``(first_seq, data)`` of at most ``block`` postings, packed."""
    lists: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for seq in sorted(docs):
        for term, tf in sorted(Counter(docs[seq]).items()):
            lists[term].append((seq, tf, len(docs[seq])))
    out: dict[str, list[tuple[int, bytes]]] = {}
    for term, postings in lists.items():
        array = np.asarray(postings, dtype=np.int64)
        out[term] = [
            (int(array[i, 0]), bm25.encode(array[i : i + block, 0], array[i : i + block, 1],
                                           array[i : i + block, 2]))
            for i in range(0, len(array), block)
        ]  # fmt: skip
    return out


def _rewrite(
    blocks: dict[str, list[tuple[int, bytes]]],
    docs: dict[int, list[str]],
    removed: dict[int, list[str]],
    added: dict[int, list[str]],
) -> None:
    """Apply the removal of ``removed``'s postings and the addition of ``added``'s to the
    blocks as the store's writes do (``changed_blocks``), in place; ``docs`` follows."""
    changes: bm25.Changes = defaultdict(dict)
    for seq, words in removed.items():
        for term in set(words):
            changes[("u", term)][seq] = None
        del docs[seq]
    for seq, words in added.items():
        for term, tf in Counter(words).items():
            changes[("u", term)][seq] = (tf, len(words))
        docs[seq] = words
    found = [
        ("u", term, first, data) for (_, term) in changes for first, data in blocks.get(term, [])
    ]
    dropped, written = bm25.changed_blocks(dict(changes), found)
    for _, term, first in dropped:
        blocks[term] = [(f, d) for f, d in blocks[term] if f != first]
    for _, term, first, data in written:
        blocks.setdefault(term, []).append((first, data))
    for term in [t for t, b in blocks.items() if not b]:
        del blocks[term]


def _rows(
    blocks: dict[str, list[tuple[int, bytes]]],
    docs: dict[int, list[str]],
    terms: list[str],
    rng: random.Random,
) -> list[tuple[Any, ...]]:
    """What ``STATISTICS`` returns for ``terms``, its rows shuffled."""
    total = sum(len(words) for words in docs.values())
    df = Counter(term for words in docs.values() for term in set(words))
    rows = [(len(docs), total, term, df[term], first, data)
            for term in terms if df[term] for first, data in blocks.get(term, [])]  # fmt: skip
    rng.shuffle(rows)
    return rows


def _check(terms: list[str], rows: list[tuple[Any, ...]], n: int) -> pruning.Pruned | None:
    """``Lists.best(n)`` equals the full scoring's best: seqs, bits, order; the pruned
    answer (if pruning was tried) is returned."""
    full = bm25.scores(terms, rows)
    want = full.best(n)
    lists = pruning.Lists.of(terms, rows)
    got, every = lists.best(n)
    assert list(got) == list(want)
    bits = [np.asarray(list(x.values()), dtype=np.float32).view(np.int32) for x in (got, want)]
    assert np.array_equal(*bits)
    assert not every or len(want) >= len(full)  # 'every match' only when it is so
    return pruning.pruned(pruning.Lists.of(terms, rows), n)


def _corpus(seed: int, size: int, vocabulary: int, ties: bool) -> dict[int, list[str]]:
    rng = random.Random(seed)
    docs: dict[int, list[str]] = {}
    seq = rng.randint(1, 1000)
    template = _document(rng, vocabulary)
    for _ in range(size):
        seq += rng.choice([1, 1, 1, 2, 7])  # gaps: other users' rows
        docs[seq] = list(template) if ties and rng.random() < 0.3 else _document(rng, vocabulary)
    return docs


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 100_000),
    size=st.integers(1, 600),
    vocabulary=st.integers(1, len(WORDS)),
    block=st.sampled_from([1, 3, 16, bm25.BLOCK]),
    n=st.integers(1, 60),
    ties=st.booleans(),
    query=st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=6),
    edits=st.integers(0, 40),
)
def test_the_pruned_best_equals_the_full_scoring(
    seed: int, size: int, vocabulary: int, block: int, n: int, ties: bool,
    query: list[int], edits: int,
) -> None:  # fmt: skip
    rng = random.Random(seed)
    docs = _corpus(seed, size, vocabulary, ties)
    blocks = _blocks(docs, block)
    # deleted rows, and rows rewritten in place (new words under the same seq)
    victims = rng.sample(sorted(docs), min(edits, len(docs) - 1))
    rewritten = {s: _document(rng, vocabulary) for s in victims if rng.random() < 0.5}
    _rewrite(blocks, docs, {s: docs[s] for s in victims}, rewritten)
    terms = sorted({WORDS[i] for i in query})
    _check(terms, _rows(blocks, docs, terms, rng), n)


def _skewed(seed: int) -> tuple[dict[int, list[str]], list[str]]:
    """A common term in every memory, a mid one in a third, a rare one in a few: the
    rare and mid lists find the best, the common list need not be scored."""
    rng = random.Random(seed)
    docs = {}
    for seq in range(1, 3001):
        words = ["common"] * rng.randint(1, 3) + ["filler"] * rng.randint(0, 20)
        if seq % 3 == 0:
            words.append("mid")
        if seq % 97 == 0:
            words += ["rare"] * rng.randint(1, 2)
        docs[seq] = words
    return docs, ["common", "mid", "rare"]


@pytest.mark.parametrize("n", [1, 5, 20])
def test_pruning_skips_postings_and_keeps_every_best(n: int) -> None:
    docs, terms = _skewed(n)
    rows = _rows(_blocks(docs, bm25.BLOCK), docs, terms, random.Random(n))
    found = _check(terms, rows, n)
    assert found is not None
    size = pruning.Lists.of(terms, rows).size
    assert found.weighed < size / 2, (found.weighed, size)


def test_a_term_in_every_memory_and_ties_at_the_cut() -> None:
    # every memory the same: every score ties, so best(n) is every memory
    docs = {seq: ["same", "words", "here"] for seq in range(10, 400)}
    terms = ["here", "same", "words"]
    rows = _rows(_blocks(docs, 16), docs, terms, random.Random(1))
    for n in (1, 7, 389, 390, 1000):
        best, _ = pruning.Lists.of(terms, rows).best(n)
        assert len(best) == 390
        _check(terms, rows, n)


def test_one_term_queries_are_scored_fully() -> None:
    docs, _ = _skewed(3)
    rows = _rows(_blocks(docs, bm25.BLOCK), docs, ["common"], random.Random(3))
    assert _check(["common"], rows, 10) is None


def test_a_bound_too_low_would_drop_a_best_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check above is sharp: with each list's bound a tenth of the truth the common
    # list is skipped although it decides the order, and the answer differs.
    docs, terms = _skewed(5)
    for seq in range(1, 3001, 3):
        docs[seq] += ["common"] * 30  # the common term now decides who is best
    rows = _rows(_blocks(docs, bm25.BLOCK), docs, terms, random.Random(5))
    _check(terms, rows, 20)
    true_bound = pruning.Lists.bound
    monkeypatch.setattr(pruning.Lists, "bound", lambda self, i: true_bound(self, i) / 10)
    with pytest.raises(AssertionError):
        _check(terms, rows, 20)


def _zipf_corpus(rng: random.Random, size: int) -> dict[int, list[str]]:
    """Memories drawn from a Zipf vocabulary of 300 words (exponent 0.8–1.4)."""
    weights = np.arange(1, 301, dtype=np.float64) ** -rng.uniform(0.8, 1.4)
    cumulative = np.cumsum(weights / weights.sum())
    docs: dict[int, list[str]] = {}
    seq = rng.randint(1, 50)
    for _ in range(size):
        seq += rng.choice([1, 1, 2, 5])
        count = rng.choice([1, 2, 4, 8, 16, 32])
        ranks = np.searchsorted(cumulative, [rng.random() for _ in range(count)])
        docs[seq] = [f"z{min(int(r), 299)}" for r in ranks]
    return docs


def test_the_pruned_best_equals_the_full_scoring_on_zipf_corpora() -> None:
    # Natural text's shape: a query mixing common and rare words, where pruning applies.
    # Every case must equal the full scoring; most must have pruned (else this tests
    # nothing the full scoring does not).
    rng = random.Random(2026)
    tried = pruned = 0
    for _ in range(80):
        docs = _zipf_corpus(rng, rng.choice([200, 800, 2500]))
        block = rng.choice([4, 64, bm25.BLOCK])
        blocks = _blocks(docs, block)
        victims = rng.sample(sorted(docs), len(docs) // 10)
        _rewrite(blocks, docs, {s: docs[s] for s in victims},
                 {s: [*docs[s][::-1], "z0"] for s in victims[::2]})  # fmt: skip
        common = [f"z{rng.randint(0, 4)}" for _ in range(rng.randint(1, 3))]
        rare = [f"z{rng.randint(10, 299)}" for _ in range(rng.randint(0, 3))]
        terms = sorted(set(common + rare))
        n = rng.choice([1, 2, 10, 20, 100])
        found = _check(terms, _rows(blocks, docs, terms, rng), n)
        tried += 1
        pruned += found is not None
    assert pruned >= tried // 2, (pruned, tried)
