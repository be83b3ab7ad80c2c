"""Vector search over one snapshot of a user's working set (``store/cache.py``): the exact
top k of a filter's rows, and for a large user the search through the approximate indexes
(``store/ann.py``, the learnings' own in ``store/ann_kinds.py``) whose candidates are mapped
onto the snapshot and scored exactly, merged with the rows the index does not hold.

Every function reads the arrays it is given and nothing else; the caches it fills
(``Arrays.counted``, ``Arrays.subsets``) belong to those arrays, so threads searching one
snapshot share them and a write's new arrays start without them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

from engrain.model import MemoryFields
from engrain.store import ann_kinds, coarse
from engrain.store.ann_rows import AnnRows
from engrain.store.arrays import MASKS_MAX, Arrays, BoolArray, Matrix, Subset
from engrain.store.base import MemoryFilter
from engrain.store.coarse import Projection
from engrain.store.reach import reachable
from engrain.store.reads import Begin, lazy


@lru_cache(maxsize=1)
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def single_threaded_blas() -> Any:
    """One BLAS thread for the search product. OpenBLAS's idle threads spin after a call and
    steal the cores onnxruntime needs for the next query embedding: at 10,000 memories this
    halves context() latency on a 2-core machine (bench/latency.py), for ~0.3 ms here."""
    return _blas().limit(limits=1, user_api="blas")


#: A filter keeping at most this many rows is searched exactly over those rows alone
#: (copying 5,000 vectors and their product cost ~1.5 ms, about an index search for a few
#: thousand candidates).
EXACT_SUBSET = 5_000
#: Candidates asked of the index per search at most (8 ms for 4,096 at 100,000 vectors): a
#: filter needing more is searched exactly over the rows it keeps.
FETCH_MAX = 2_048
#: Over-fetch: candidates asked = k / share of the index's vectors passing x factor + 16
#: (nearest neighbours pass a filter less often than the average row), the factor
#: 1 + OVERFETCH_SLOPE x (1 - share), at most OVERFETCH: 2 for a filter keeping half the
#: rows or fewer, 1 for a filter keeping every row (the gate's pool on the benchmark's
#: corpus), where asking for twice k gave the same R@50 (0.9974 / 0.9984 against 0.9974 /
#: 0.9982 on the 100,000-memory corpus, tuning / held-out queries) for ~0.5 ms more per
#: search (docs/scale.md, "Session 8").
OVERFETCH = 2.0
OVERFETCH_SLOPE = 2.0


def approximate(
    arrays: Arrays,
    ann: AnnRows,
    query: npt.NDArray[np.float32],
    searches: Sequence[tuple[int, MemoryFilter]],
    mask_of: Callable[[Arrays, MemoryFilter], BoolArray],
    part: AnnRows | None = None,
    part_expected: bool = False,
    begin: Begin | None = None,
) -> list[list[tuple[MemoryFields, float]]]:
    """:meth:`~engrain.store.cache.UserCache.search_many` through the index: one index
    search sized for the most demanding filter (over-fetched by how few of the index's
    vectors each filter keeps),
    its candidates mapped onto ``arrays`` and kept if they pass, are held with their current
    vector and can be among the k best by their int8 similarity (``store/reach.py``), and
    score exactly; plus the rows passing that the index does not hold. A filter keeping
    few rows, or too few among the candidates, is searched exactly over its rows. A filter
    of the typed learnings' kinds goes through their own index (``part``,
    ``store/ann_kinds.py``) when there is one, and through the first while one is being
    made (``part_expected``). ``begin`` (``store/reads.py``: :meth:`Reads.beside`) starts
    the walk of each index after the first with the read of its searches' candidates
    (:func:`_nears`), to run beside the first's walk and reads; the calling thread scores
    them when their searches' turn comes. None: all of it in the calling thread, in turn."""
    covered = [ann_kinds.covers(flt) for _, flt in searches]
    records = [part if part is not None and covers else ann for covers in covered]
    masks, counts, all_held = [], [], []
    for (k, flt), record, covers in zip(searches, records, covered, strict=True):
        size = max(len(record.index), 1)
        _, mask, passing, kept = counted_rows(arrays, record.held, flt, mask_of)
        masks.append(mask)
        all_held.append(passing == kept)
        share = passing / size
        factor = min(OVERFETCH, 1.0 + OVERFETCH_SLOPE * (1.0 - share))
        if record is part:
            factor = max(factor, ann_kinds.OVERFETCH)
        count = int(k / max(share, 1 / size) * factor) + 16
        # a filter keeping a small share is searched exactly over its (cached) rows: the
        # index's candidates pass it less often than its share (a query's neighbours are
        # facts when the filter keeps learnings), so over-fetching rarely yields k
        # ... unless it keeps more than SUBSET_MAX rows (a million memories' learnings: a
        # copy of 220,000 vectors and a product over them per call): through the index then
        # ... or it has an index of its own (the learnings), or will have once it is ready
        # (through the first index meanwhile: a copy would outlive the wait)
        own = covers and (part is not None or part_expected)
        small = kept <= (EXACT_SUBSET if own else
                         max(EXACT_SUBSET, min(SUBSET_SHARE * len(mask), SUBSET_MAX)))  # fmt: skip
        exact = k <= 0 or passing == 0 or small or (count > FETCH_MAX and kept <= SUBSET_MAX)
        counts.append(0 if exact else min(count, size, FETCH_RETRY))
    # one walk per index, as wide as its most demanding search; the other indexes' walks,
    # with their candidates' rows read, begun by ``begin`` before the first index's walk
    widest: dict[int, int] = {}
    for record, count in zip(records, counts, strict=True):
        if count:
            widest[id(record)] = max(widest.get(id(record), 0), count)
    walked = [r for r in {id(r): r for r in records}.values() if id(r) in widest]
    later: dict[int, Callable[[], dict[int, Near | None]]] = {}
    for record in walked[1:]:
        mine = {i: (searches[i][0], masks[i], counts[i], all_held[i])
                for i, r in enumerate(records)
                if r is record and counts[i] and searches[i][0] > 0}  # fmt: skip
        job = partial(_nears, arrays, record, query, widest[id(record)], mine)
        later[id(record)] = (lazy if begin is None else begin)(job)
    first = _walk(walked[0], query, widest[id(walked[0])]) if walked else None
    out: list[list[tuple[MemoryFields, float]]] = []
    with single_threaded_blas():
        for i, ((k, flt), mask, count, record, held_all) in enumerate(
            zip(searches, masks, counts, records, all_held, strict=True)
        ):
            if k <= 0:
                out.append([])
                continue
            if count and id(record) in later:
                near = later[id(record)]()[i]
            else:
                near = _near(
                    arrays, record, query, k, mask, count, held_all, first if count else None
                )
            out.append(_scored(arrays, query, k, flt, mask, near))
    return out


#: An index walk's candidates: their rows (-1: no row) and int8 similarities.
Walk = tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]
#: A search's candidates to score: their rows, ids (None: made by the matrix) and vectors.
Near = tuple[npt.NDArray[np.intp], Sequence[str] | None, Matrix]


def _walk(record: AnnRows, query: npt.NDArray[np.float32], count: int) -> Walk:
    """The ``count`` nearest of ``record``'s index to ``query`` (usearch releases the GIL
    while it walks)."""
    keys, similar = record.index.search_similar(query, count)
    return record.rows_of(keys), similar


def _nears(
    arrays: Arrays,
    record: AnnRows,
    query: npt.NDArray[np.float32],
    width: int,
    searches: dict[int, tuple[int, BoolArray, int, bool]],
) -> dict[int, Near | None]:
    """One walk of ``record``'s index ``width`` wide and each of its ``searches``' (by
    position: ``k``, mask, candidates asked, whether the index holds every row passing)
    candidates read, as :func:`_near`."""
    walk = _walk(record, query, width)
    return {i: _near(arrays, record, query, k, mask, count, held_all, walk)
            for i, (k, mask, count, held_all) in searches.items()}  # fmt: skip


def _near(
    arrays: Arrays,
    record: AnnRows,
    query: npt.NDArray[np.float32],
    k: int,
    mask: BoolArray,
    count: int,
    held_all: bool,
    walk: Walk | None,
) -> Near | None:
    """The rows to score for one search of :func:`approximate`: of the first ``count``
    candidates of ``walk`` (``record``'s index), those passing ``mask`` that can be among
    the ``k`` best, and the rows passing that the index does not hold, with their ids and
    vectors; None when too few pass (or no ``walk``): the search is exact then."""
    if walk is None:
        return None
    size = max(len(record.index), 1)
    near, near_similar = passing_rows(walk[0][:count], walk[1][:count], mask, record.held)
    if near.size < k and count < size and int(mask.sum()) > SUBSET_MAX:
        # too few passed: once more with more candidates, not a huge exact search
        count = min(size, FETCH_RETRY, max(8 * count, FETCH_MAX))
        near, near_similar = passing_rows(*_walk(record, query, count), mask, record.held)
    if near.size < k and count < size:
        return None
    # only the candidates that can be among the k best are read and scored
    near = near[reachable(near_similar, k)]
    rows = np.unique(np.concatenate([near, _unheld(mask, record.held, held_all)]))
    # each candidate's id made once: its kept fields, vector and row found
    ids = arrays.ids_of(rows) if arrays.matrix is None else None
    return rows, ids, scored_vectors(arrays, rows, ids=ids)


def _scored(
    arrays: Arrays,
    query: npt.NDArray[np.float32],
    k: int,
    flt: MemoryFilter,
    mask: BoolArray,
    near: Near | None,
) -> list[tuple[MemoryFields, float]]:
    """The ``k`` best of ``near`` by exact score; without ``near`` (few rows pass, or too
    few near the query), exact over the rows passing ``flt`` (``mask``; a large filter's:
    over the best of them by a coarse pass, store/coarse.py)."""
    if near is None:
        return subset_top(arrays, subset_of(arrays, flt, mask), query, k)
    rows, ids, vectors = near
    return top_rows(arrays, rows, vectors @ query, k, vectors, ids=ids)


def _unheld(mask: BoolArray, held: BoolArray, held_all: bool) -> npt.NDArray[np.intp]:
    """The rows ``mask`` keeps that the index does not hold (written or re-embedded since
    it was built or patched): none if it holds every one of them (``held_all``, counted
    once per set of columns by :func:`counted_rows`), without a pass over every row (two
    per call, ~0.2 ms each at a million rows)."""
    if held_all:
        return np.zeros(0, dtype=np.intp)
    return np.flatnonzero(mask & ~held)


def subset_top(
    arrays: Arrays, subset: Subset, query: npt.NDArray[np.float32], k: int
) -> list[tuple[MemoryFields, float]]:
    """The ``k`` best of a filter's rows (``subset``) by exact score, from its float32
    copy (a large filter's: among the best by its coarse projection, store/coarse.py)."""
    rows, copied, rough = subset
    assert copied is not None
    picked = None if rough is None else rough.candidates(query, k)
    if picked is not None:
        rows, copied = rows[picked], copied[picked]
    return top_rows(arrays, rows, copied @ query, k, copied)


def scored_vectors(
    arrays: Arrays, rows: npt.NDArray[np.intp], *, ids: Sequence[str] | None = None
) -> Matrix:
    """The vectors of candidate ``rows`` to score exactly: a memory kept built or a row
    kept as an earlier search found it gives its own (nothing read: ~20 % of a large
    user's candidates at 100,000 memories), the others are read from the store with their
    texts. ``ids``: the rows' ids if the caller made them (:meth:`Arrays.ids_of`)."""
    if arrays.matrix is not None or not len(rows):
        return arrays.vectors(rows, texts=True, ids=ids)
    ids = arrays.ids_of(rows, ids)
    kept = arrays.rows.decoded.fields_many(ids)
    dim = arrays.dim
    have = np.array([m is not None and m.embedding is not None and m.embedding.shape == (dim,)
                     for m in kept], dtype=bool)  # fmt: skip
    if not have.any():
        return arrays.vectors(rows, texts=True, ids=ids)
    out = np.empty((len(rows), dim), dtype=np.float32)
    out[have] = np.stack([m.embedding for m in kept if m is not None and m.embedding is not None
                          and m.embedding.shape == (dim,)])  # fmt: skip
    if not have.all():
        todo = np.flatnonzero(~have)
        out[todo] = arrays.vectors(rows[todo], texts=True, ids=[ids[i] for i in todo.tolist()])
    return out


def counted_rows(
    arrays: Arrays,
    held: BoolArray,
    flt: MemoryFilter | None,
    mask_of: Callable[[Arrays, MemoryFilter], BoolArray],
) -> tuple[BoolArray, BoolArray, int, int]:
    """For the rows passing ``flt`` (``None``: every row) with a vector: ``held``, their
    mask, how many of them ``held`` marks, how many there are; computed once per set of
    columns and index record (``Arrays.counted``)."""
    found = arrays.counted.get(flt)
    if found is not None and found[0] is held:
        return found
    if flt is None:
        mask = arrays.has_vector
    else:
        mask = mask_of(arrays, flt) & arrays.has_vector
        mask.flags.writeable = False
    found = (held, mask, int(np.count_nonzero(mask & held)), int(np.count_nonzero(mask)))
    if len(arrays.counted) >= MASKS_MAX:
        arrays.counted.clear()
    arrays.counted[flt] = found
    return found


def passing_rows(
    rows: npt.NDArray[np.intp],
    similar: npt.NDArray[np.float32],
    mask: BoolArray,
    held: BoolArray,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
    """The candidate ``rows`` (-1: no row) passing ``mask`` and held by the index, with
    their ``similar`` (one per candidate)."""
    known = rows >= 0
    rows, similar = rows[known], similar[known]
    keep = mask[rows] & held[rows]
    return rows[keep], similar[keep]


#: Filters keeping at most this share of the rows, and at most SUBSET_MAX rows, are searched
#: exactly over them (with their vectors copied once by :func:`subset_of`); at most this many
#: filters' copies are kept (60% of the matrix again, at most).
SUBSET_SHARE = 0.3
SUBSET_MAX = 50_000
SUBSETS_MAX = 2
#: Candidates asked of the index for a filter keeping more than SUBSET_MAX rows, at most
#: (a second search when the first yields fewer than k passing).
FETCH_RETRY = 16_384


def subset_of(arrays: Arrays, flt: MemoryFilter, mask: BoolArray) -> Subset:
    """The rows passing ``flt`` (``mask``) and their vectors, copied once per set of
    columns for a filter keeping a small share of them, with a coarse projection if it
    keeps at least :data:`~engrain.store.coarse.MIN_ROWS` (``store/coarse.py``)."""
    cached = arrays.subsets.get(flt)
    if cached is not None:
        return cached
    rows = np.flatnonzero(mask)
    earlier = arrays.earlier_subsets.get(flt)  # same vectors: valid if the same rows
    if earlier is not None and earlier.vectors is not None and np.array_equal(earlier.rows, rows):
        found = earlier
    else:
        found = Subset(rows, arrays.vectors(rows))
    if rows.size > SUBSET_SHARE * len(arrays):
        return found  # searched once, not kept: no projection either
    if found.coarse is None and rows.size >= coarse.MIN_ROWS and found.vectors is not None:
        basis = None if earlier is None or earlier.coarse is None else earlier.coarse.basis
        if basis is not None and basis.shape[1] != found.vectors.shape[1]:
            basis = None
        found = found._replace(coarse=Projection.of(found.vectors, basis))
    if len(arrays.subsets) >= SUBSETS_MAX:
        arrays.subsets.clear()
    arrays.subsets[flt] = found
    return found


def top_rows(
    arrays: Arrays,
    rows: npt.NDArray[np.intp],
    scores: npt.NDArray[np.float32],
    k: int,
    vectors: Matrix | None = None,
    *,
    ids: Sequence[str] | None = None,
) -> list[tuple[MemoryFields, float]]:
    """The ``k`` best of ``rows`` by ``scores`` (one per row), best first; ties keep row
    order, as in :func:`exact_top`. ``vectors``: the rows' vectors the scores came from (the
    rows found get theirs, not read again); ``ids``: the rows' ids, if made. Each as its
    fields (``store/found.py``): the caller builds the memories it returns."""
    if rows.size == 0:
        return []
    order = np.argsort(rows, kind="stable")
    rows, scores = rows[order], scores[order]
    top = np.argpartition(-scores, k - 1)[:k] if rows.size > k else np.arange(rows.size)
    top = top[np.argsort(-scores[top], kind="stable")]
    picked = None if vectors is None or arrays.matrix is not None else vectors[order[top]]
    chosen = None if ids is None else [ids[i] for i in order[top].tolist()]
    found = arrays.found_of(rows[top].tolist(), picked, ids=chosen, defer_texts=True)
    return list(zip(found, scores[top].tolist(), strict=True))


def exact_top(
    arrays: Arrays, scores: npt.NDArray[np.float32], mask: BoolArray, k: int
) -> list[tuple[MemoryFields, float]]:
    """The ``k`` best of the rows ``mask`` keeps by ``scores`` (one per row of
    ``arrays``), best first; equal scores keep row order; each as its fields (their texts,
    if kept in the store, read when first asked for: ``store/texts.py``)."""
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return []
    picked = scores[rows]
    top = np.argpartition(-picked, k - 1)[:k] if rows.size > k else np.arange(rows.size)
    top = top[np.argsort(-picked[top], kind="stable")]
    found = arrays.found_of(rows[top].tolist(), defer_texts=True)
    return list(zip(found, picked[top].tolist(), strict=True))
