"""The BM25 index's postings held compactly (issue 18, docs/scale.md "Session 9: memory"):
documents as uint16 gaps where every gap of a term fits (else int32 documents), term
frequencies as uint8 (wider only when a count needs it); every score equal, bit for bit,
to the float32 formula over plain int32 documents it replaced."""

from __future__ import annotations

import math
import random

import numpy as np
import numpy.typing as npt
import pytest

from engrain.store import lexical
from engrain.store.lexical import K1, LexicalIndex, tokenize
from tests.test_lexical import _as_dict, _corpus, _reference


def _plain_scores(documents: list[str], query: str) -> npt.NDArray[np.float32]:
    """BM25 as the index computed it before: int32 documents, float32 frequencies."""
    postings, lengths = _reference(documents)
    size = len(documents)
    length = np.asarray(lengths, dtype=np.float32)
    average = float(length.mean()) if size else 0.0
    norm = K1 * (1.0 - lexical.B + lexical.B * length / max(average, 1e-9))
    out = np.zeros(size, dtype=np.float32)
    for term in sorted(set(tokenize(query))):  # the index's order of summing
        if term not in postings:
            continue
        docs = np.asarray(postings[term][0], dtype=np.int32)
        tfs = np.asarray(postings[term][1], dtype=np.float32)
        idf = math.log(1.0 + (size - len(docs) + 0.5) / (len(docs) + 0.5))
        out[docs] += idf * tfs * (K1 + 1.0) / (tfs + norm[docs])
    return out


def _held_bytes(index: LexicalIndex) -> int:
    return sum(docs.nbytes + tfs.nbytes for docs, tfs in index._postings.values())


def _wide_corpus() -> list[str]:
    """70,000 short documents: "common" in every third, "sparse" only in the first and
    the last (a gap over 65,535: held as int32 documents), "echo" 300 times in one (a
    frequency over 255: held as uint16)."""
    docs = [("common alpha" if i % 3 == 0 else "beta") for i in range(70_000)]
    docs[0] += " sparse"
    docs[-1] += " sparse"
    docs[17] += " echo" * 300
    return docs


QUERIES = ["paint kyoto", "running glasses 42", "rare55 café", "common", "sparse echo beta",
           "nothing matches this"]  # fmt: skip


def test_scores_are_those_of_plain_postings_bit_for_bit() -> None:
    docs = _corpus(900)
    index = LexicalIndex(docs)
    for query in QUERIES:
        assert np.array_equal(index.scores(query), _plain_scores(docs, query))


def test_wide_gaps_and_counts_are_held_wider_and_score_the_same() -> None:
    docs = _wide_corpus()
    index = LexicalIndex(docs)
    held = index._postings
    assert held["common"][0].dtype == np.uint16 and held["common"][1].dtype == np.uint8
    assert held["spars"][0].dtype == np.int32  # "sparse"'s term: one gap too wide for 16 bits
    assert held["echo"][1].dtype == np.uint16 and int(held["echo"][1][0]) == 300
    for query in ("common sparse", "echo alpha", "beta"):
        assert np.array_equal(index.scores(query), _plain_scores(docs, query))
    # what a process holds: 3 bytes a posting where they fit (8 before)
    common = held["common"]
    assert common[0].nbytes + common[1].nbytes == 3 * len(common[0])
    postings = sum(len(d) for d, _ in held.values())
    assert _held_bytes(index) < 3.1 * postings


def test_extended_replaced_without_and_saved_keep_the_same_scores() -> None:
    docs = _wide_corpus()
    head, tail = docs[:40_000], docs[40_000:]
    grown = LexicalIndex(head).extended(tail)  # "sparse": a gap over 65,535 appended
    assert grown._postings["spars"][0].dtype == np.int32
    assert grown._postings["common"][0].dtype == np.uint16
    assert _as_dict(grown) == _as_dict(LexicalIndex(docs))
    edited = {5: (docs[5], "echo " * 400 + "sparse"), 69_000: (docs[69_000], "common")}
    changed = list(docs)
    for row, (_, new) in edited.items():
        changed[row] = new
    replaced = grown.replaced(edited)
    assert _as_dict(replaced) == _as_dict(LexicalIndex(changed))
    keep = np.ones(len(docs), dtype=bool)
    keep[1:30_000] = False  # the rest renumbered: "sparse"'s gap fits again
    smaller = LexicalIndex(docs).without(keep)
    rest = [d for d, k in zip(docs, keep, strict=True) if k]
    assert smaller._postings["spars"][0].dtype == np.uint16
    saved = LexicalIndex.from_arrays(smaller.to_arrays())
    for query in ("common sparse", "echo alpha beta"):
        want = _plain_scores(rest, query)
        assert np.array_equal(smaller.scores(query), want)
        assert np.array_equal(saved.scores(query), want)
    assert np.array_equal(replaced.scores("echo sparse common"),
                          _plain_scores(changed, "echo sparse common"))  # fmt: skip


def test_random_writes_keep_every_score() -> None:
    rng = random.Random(11)
    docs = _corpus(300, seed=9)
    index = LexicalIndex(docs[:100])
    held = docs[:100]
    for start in range(100, 300, 50):
        index = index.extended(docs[start : start + 50])
        held = held + docs[start : start + 50]
        row = rng.randrange(len(held))
        new = " ".join(rng.choice(["paint", "kyoto", "glasses"]) for _ in range(rng.randint(1, 9)))
        index = index.replaced({row: (held[row], new)})
        held[row] = new
        for query in QUERIES:
            assert np.array_equal(index.scores(query), _plain_scores(held, query))


def test_saved_arrays_with_a_count_that_is_not_whole_are_refused() -> None:
    arrays = LexicalIndex(_corpus(50)).to_arrays()
    assert arrays["tfs"].dtype == np.uint8
    floats = dict(arrays, tfs=arrays["tfs"].astype(np.float32))
    assert _as_dict(LexicalIndex.from_arrays(floats)) == _as_dict(LexicalIndex(_corpus(50)))
    broken = dict(arrays, tfs=arrays["tfs"].astype(np.float32) + np.float32(0.5))
    with pytest.raises(ValueError):
        LexicalIndex.from_arrays(broken)
