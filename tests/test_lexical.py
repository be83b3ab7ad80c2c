"""The BM25 index built with numpy (issue 18, docs/scale.md defect 3): the same postings,
lengths and rankings as counting each document's tokens one by one (the build before, kept
here as the reference), across the chunks the build reads documents in; and a deletion
removes documents from the index instead of dropping it."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engrain.store import lexical
from engrain.store.lexical import LexicalIndex, tokenize

WORDS = ["paint", "painted", "painting", "paints", "tomás", "Kyoto", "kyoto's", "the", "of",
         "running", "runs", "ran", "planned", "plans", "berries", "class", "glasses", "42",
         "2023", "don't", "it's", "we've", "o'clock", "naïve", "café", "x", "ok", "Deploys",
         "deployed", "CI", "ci-pipeline", "search_index", "e-mail", "peanuts", "menus",
         "rock'n'roll", "'quoted'", "a''b", "İstanbul", "\u212aelvin", "nul\x00byte", "tab\tbed",
         "ΣΊΣΥΦΟΣ", "\ud800lone", "x'9", "'s", "ßtraße", "ＦＵＬＬ"]  # fmt: skip


def _corpus(n: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        size = rng.choice([0, 1, 3, 8, 20, 40])
        words = [rng.choice(WORDS) for _ in range(size)]
        if i % 11 == 0:
            words.append(f"rare{i}")
        docs.append(rng.choice([" ", ", ", ". ", "\n"]).join(words))
    docs[3] = "The the THE of of"  # only stopwords: length 0
    docs[4] = ""
    return docs


def _reference(documents: list[str]) -> tuple[dict[str, tuple[list[int], list[int]]], list[int]]:
    """Term → (documents, term frequencies), and each length: each document's
    ``tokenize``, counted one by one."""
    postings: dict[str, tuple[list[int], list[int]]] = {}
    lengths = []
    for row, text in enumerate(documents):
        counts = Counter(tokenize(text))
        lengths.append(sum(counts.values()))
        for term, tf in counts.items():
            docs, tfs = postings.setdefault(term, ([], []))
            docs.append(row)
            tfs.append(tf)
    return postings, lengths


def _as_dict(index: LexicalIndex) -> tuple[dict[str, tuple[list[int], list[float]]], list[float]]:
    arrays = index.to_arrays()
    bounds = arrays["offsets"].tolist()
    postings = {
        str(term): (arrays["docs"][bounds[i] : bounds[i + 1]].tolist(),
                    arrays["tfs"][bounds[i] : bounds[i + 1]].tolist())
        for i, term in enumerate(arrays["terms"].tolist())
    }  # fmt: skip
    return postings, arrays["lengths"].tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("aZk9 '\x00\t.İ\u212aéß-s")), max_size=30),
                max_size=12))  # fmt: skip
def test_any_text_gives_the_postings_of_tokenize(docs: list[str]) -> None:
    postings, lengths = _reference(docs)
    built, built_lengths = _as_dict(LexicalIndex(docs))
    assert built_lengths == lengths
    assert built == {t: (rows, [float(f) for f in tfs]) for t, (rows, tfs) in postings.items()}


def _ranking(index: LexicalIndex, query: str) -> list[int]:
    scores = index.scores(query)
    rows = np.flatnonzero(scores > 0)
    return [int(r) for r in rows[np.lexsort((rows, -scores[rows]))]]


@pytest.mark.parametrize("chunk", [7, 64, 16_384])
def test_the_numpy_build_has_the_postings_of_counting_each_document(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(lexical, "SCAN_DOCUMENTS", chunk)
    docs = _corpus(500)
    postings, lengths = _reference(docs)
    built, built_lengths = _as_dict(LexicalIndex(docs))
    assert built_lengths == lengths
    assert built.keys() == postings.keys()
    for term, (rows, tfs) in postings.items():
        assert built[term] == (rows, [float(t) for t in tfs]), term


def test_rankings_equal_those_of_the_reference_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lexical, "SCAN_DOCUMENTS", 50)
    docs = _corpus(400, seed=9)
    postings, lengths = _reference(docs)
    reference = LexicalIndex.from_arrays(_arrays_of(postings, lengths))
    index = LexicalIndex(docs)
    for query in ["painting in Kyoto", "rare11 plans", "ci pipeline 42", "the of", "café naïve",
                  "glasses class", "running deployed menus peanuts"]:  # fmt: skip
        assert np.allclose(index.scores(query), reference.scores(query), rtol=1e-6)
        assert _ranking(index, query) == _ranking(reference, query)
    assert _ranking(index, "rare11")[:1] == [11]


def _arrays_of(
    postings: dict[str, tuple[list[int], list[int]]], lengths: list[int]
) -> dict[str, np.ndarray]:
    terms = sorted(postings)
    offsets = np.cumsum([0] + [len(postings[t][0]) for t in terms])
    return {
        "terms": np.array(terms, dtype=str),
        "offsets": offsets.astype(np.int64),
        "docs": np.array([d for t in terms for d in postings[t][0]], dtype=np.int32),
        "tfs": np.array([f for t in terms for f in postings[t][1]], dtype=np.float32),
        "lengths": np.array(lengths, dtype=np.float32),
    }


def test_extended_and_replaced_keep_the_postings_of_a_build_from_scratch() -> None:
    docs = _corpus(300, seed=2)
    grown = LexicalIndex(docs[:120]).extended(docs[120:200]).extended(docs[200:])
    assert _as_dict(grown) == _as_dict(LexicalIndex(docs))
    edited = {5: (docs[5], "painted berries in Kyoto"), 250: (docs[250], "")}
    changed = list(docs)
    changed[5], changed[250] = "painted berries in Kyoto", ""
    assert _as_dict(grown.replaced(edited)) == _as_dict(LexicalIndex(changed))


def test_a_deletion_removes_documents_with_the_scores_of_a_build_over_the_rest() -> None:
    docs = _corpus(400, seed=4)
    keep = np.ones(len(docs), dtype=bool)
    keep[[0, 11, 12, 13, 200, 399]] = False  # rare0 and rare11 leave the vocabulary
    rest = [d for d, k in zip(docs, keep, strict=True) if k]
    index = LexicalIndex(docs)
    smaller = index.without(keep)
    assert _as_dict(smaller) == _as_dict(LexicalIndex(rest))
    assert smaller.size == len(rest) and index.size == len(docs)  # the old one unchanged
    for query in ["painting in Kyoto", "rare11", "rare22 berries", "ci 2023"]:
        assert np.array_equal(smaller.scores(query), LexicalIndex(rest).scores(query))
    assert LexicalIndex(docs).without(np.zeros(len(docs), dtype=bool)).size == 0
    with pytest.raises(ValueError):
        index.without(keep[:-1])


def test_an_empty_corpus_scores_nothing() -> None:
    index = LexicalIndex([])
    assert index.size == 0 and index.scores("anything").size == 0
    assert _as_dict(index.extended(["paint it"])) == _as_dict(LexicalIndex(["paint it"]))


def test_a_forget_keeps_the_working_sets_bm25_index_with_the_rest_documents(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import UTC, datetime

    from engrain.model import Kind, Memory
    from engrain.store.memory import MemoryStore

    now = datetime(2026, 1, 1, tzinfo=UTC)
    docs = [d.replace("\ud800", "") or "empty" for d in _corpus(120, seed=8)]
    memories = [Memory.new("ada", d, Kind.FACT.default_memory_type, Kind.FACT, now=now)
                for d in docs]  # fmt: skip
    store = MemoryStore()
    store.write(memories)
    assert store.lexical_search("ada", "painting kyoto", 10)
    cache = store._users["ada"]
    built = cache._snapshot.lexical
    assert built is not None
    rebuilt: list[int] = []
    original = LexicalIndex.__init__

    def counting(self: LexicalIndex, documents: list[str]) -> None:
        rebuilt.append(len(documents))
        original(self, documents)

    monkeypatch.setattr(LexicalIndex, "__init__", counting)
    gone = [memories[i] for i in (0, 11, 50, 119)]
    store.write(deletes=gone)
    kept = cache._snapshot.lexical
    assert kept is not None and kept is not built and kept.size == 116
    queries = ["painting kyoto", "rare11", "rare22 berries", "ci 2023 plans"]
    found = {q: store.lexical_search("ada", q, 200) for q in queries}
    assert rebuilt == []  # no document tokenized again
    fresh = MemoryStore()
    fresh.write([m for m in memories if m not in gone])
    for query in queries:
        assert [(m.id, round(s, 5)) for m, s in found[query]] == [
            (m.id, round(s, 5)) for m, s in fresh.lexical_search("ada", query, 200)
        ]
        assert not {m.id for m, _ in found[query]} & {m.id for m in gone}
