"""A saved BM25 copy loaded as its postings are held (issue 18, docs/scale.md "Session 29:
…"): ``LexicalIndex.to_held`` writes the uint16 gaps and uint8 frequencies themselves,
``lexical_file.parsed`` reads every array as a view of the saved bytes
(``lexical_file.views``) and ``LexicalIndex.from_held`` slices them per term: nothing
decoded or copied on a load, the same postings (dtypes included) and the same scores,
bit for bit, as the index saved; a damaged copy is refused as before."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import numpy as np
import pytest

from engrain.store import lexical, lexical_file
from engrain.store.lexical import LexicalIndex
from tests.test_lexical import _corpus
from tests.test_lexical_compact import QUERIES, _wide_corpus

FINGERPRINT = bytes(range(32))


def _same_postings(a: LexicalIndex, b: LexicalIndex) -> None:
    assert list(a._postings) == list(b._postings)
    for term, (docs, tfs) in a._postings.items():
        other_docs, other_tfs = b._postings[term]
        assert docs.dtype == other_docs.dtype and np.array_equal(docs, other_docs), term
        assert tfs.dtype == other_tfs.dtype and np.array_equal(tfs, other_tfs), term
    assert np.array_equal(a._lengths, b._lengths) and a.size == b.size


@pytest.mark.parametrize("corpus", ["plain", "wide"])
def test_a_saved_copy_loads_the_postings_it_held_and_scores_alike(corpus: str) -> None:
    """Narrow lists, int32 documents (a gap over 65,535) and a uint16 frequency (over 255)
    come back as they were held, and every query scores the same floats."""
    documents = _corpus(900) if corpus == "plain" else _wide_corpus()
    index = LexicalIndex(documents)
    saved = lexical_file.parsed(lexical_file.dump(index, FINGERPRINT), FINGERPRINT)
    assert saved is not None and saved.fingerprint == FINGERPRINT
    _same_postings(index, saved.index)
    for query in QUERIES:
        assert np.array_equal(saved.index.scores(query), index.scores(query))
        for got, want in zip(saved.index.top(query, 7), index.top(query, 7), strict=True):
            assert np.array_equal(got, want)
    assert lexical_file.load_matching(lexical_file.dump(index, FINGERPRINT), FINGERPRINT,
                                      len(documents)) is not None  # fmt: skip


def test_the_loaded_postings_are_views_of_the_saved_bytes_and_read_only() -> None:
    index = LexicalIndex(_corpus(900))
    data = lexical_file.dump(index, FINGERPRINT)
    saved = lexical_file.parsed(data, FINGERPRINT)
    assert saved is not None
    for docs, tfs in saved.index._postings.values():
        assert np.shares_memory(docs, np.frombuffer(data, dtype=np.uint8))
        assert not docs.flags.writeable and not tfs.flags.writeable
    # a write to the index makes new arrays: the saved bytes' views are never written
    grown = saved.index.extended(["paint the fence again"])
    assert np.array_equal(
        grown.scores("paint"),
        LexicalIndex([*_corpus(900), "paint the fence again"]).scores("paint"),
    )


def _rewritten(data: bytes, change: Any) -> bytes:
    """``data`` with its arrays as ``change`` leaves them, saved again."""
    with np.load(io.BytesIO(data), allow_pickle=False) as saved:
        arrays = {name: np.array(saved[name]) for name in saved.files}
    change(arrays)
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def _document_out_of_range(arrays: dict[str, Any]) -> None:
    arrays["gaps"][0] = np.uint16(len(arrays["lengths"]) + 5)


def _zero_frequency(arrays: dict[str, Any]) -> None:
    arrays["tfs"][3] = 0


def _empty_term(arrays: dict[str, Any]) -> None:
    arrays["offsets"][1] = arrays["offsets"][0]


def _docs_as_int64(arrays: dict[str, Any]) -> None:
    arrays["gaps"] = arrays["gaps"].astype(np.int64)


def _gaps_cut_short(arrays: dict[str, Any]) -> None:
    arrays["gaps"] = arrays["gaps"][:-1]


@pytest.mark.parametrize(
    "damage",
    [
        _document_out_of_range,
        _zero_frequency,
        _empty_term,
        _docs_as_int64,
        _gaps_cut_short,
    ],
)
@pytest.mark.parametrize("widen", [None, 5])
def test_a_damaged_copy_is_refused(
    damage: Any, widen: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``widen``: the gaps widened a few at a time, so that lists are summed both in runs
    and alone (``lexical._last_document``)."""
    if widen is not None:
        monkeypatch.setattr(lexical, "_WIDEN", widen)
    data = lexical_file.dump(LexicalIndex(_corpus(300)), FINGERPRINT)
    assert lexical_file.parsed(data, FINGERPRINT) is not None
    assert lexical_file.parsed(_rewritten(data, damage), FINGERPRINT) is None


def test_a_compressed_or_cut_archive_is_refused() -> None:
    data = lexical_file.dump(LexicalIndex(_corpus(300)), FINGERPRINT)
    with np.load(io.BytesIO(data), allow_pickle=False) as saved:
        arrays = {name: np.array(saved[name]) for name in saved.files}
    packed = io.BytesIO()
    np.savez_compressed(packed, **arrays)
    assert lexical_file.parsed(packed.getvalue(), FINGERPRINT) is None
    assert lexical_file.parsed(data[: len(data) // 2], FINGERPRINT) is None
    with pytest.raises(ValueError):
        lexical_file.views(packed.getvalue())
    with pytest.raises(zipfile.BadZipFile):
        lexical_file.views(data[: len(data) // 2])


def test_an_earlier_layout_is_not_taken() -> None:
    """A copy of the layout before (``to_arrays``: int32 documents) is another version's:
    read as none saved, and rebuilt."""
    index = LexicalIndex(_corpus(300))
    out = io.BytesIO()
    np.savez(out, fingerprint=np.frombuffer(FINGERPRINT, dtype=np.uint8), **index.to_arrays())
    assert lexical_file.parsed(out.getvalue(), FINGERPRINT) is None
