"""The held learnings' vectors at two bytes a value, and the exact ranking they lead to
(issue 18, session 23).

``learnings.py`` ranks a large user's learnings in process. Holding their float32 vectors
cost ~34 MB at 100,000 memories (22,000 learnings), the largest part of a worker's memory
after the pool's graph. Here each vector is held as int16 steps of its own scale: a row's
largest component is 32,767 steps (:data:`STEPS`), so each value is within half a step of
the stored float32, ~8 times closer than float16 would hold it, and numpy multiplies int16
by a float32 query at SIMD speed (its float16 → float32 cast is a scalar loop: ~17 ms a
product at 22,000 rows against ~4, ``/tmp`` probe, session 23).

**Exact all the same.** A row's product from its steps differs from the float32 score the
exact search computes by at most :attr:`Quantized.error` times the query's length (the
steps' distance from the stored vector, measured exactly when the row is quantized, plus
the float32 sums' rounding, Higham's bound). So every row whose exact score reaches the
k-th best has an approximate score within twice that of the k-th best approximate one:
those rows (:func:`window`, the k plus the few within ~2·10⁻⁴ of the k-th) are the
candidates, their float32 vectors are read from the database with their rows, and
:func:`exact_top` ranks them by the same float32 arithmetic as a product over every
stored vector (``np.einsum`` row by row, the inverse length from ``np.linalg.norm``: each
row's result does not depend on the rows around it), ties by seq. The answer is the exact
search's, bit for bit.

A row's vector is recognised by a 64-bit digest of its stored bytes (:func:`digests`), so a
change of a row's vector is seen without holding the vector.

**A product in stages** (session 26): the product over every row was ~4-5 ms of a search
thread's CPU a ``context()`` at 100,000 memories (22,000 learnings), the largest item of the
learnings' search, which is the longer of ``search_many``'s two. Rows from
:data:`STAGED_ROWS` up are held in a basis of their own (:func:`basis_of`: the directions
of most energy of the rows first, an orthonormal rotation, so every product is the same)
and as column blocks (:data:`STAGES`). A search multiplies every row by the query's first
block only, takes the :data:`PROBE_PER_ROW` × ``k`` best of those partial products and
multiplies them in full, so the k-th best of those is a score some k rows reach; then it
drops each row whose partial product plus the most the rest could add (Cauchy-Schwarz: the
rest of the row's length times the rest of the query's) falls short of it, block by block,
and multiplies in full only the rows left (:func:`staged_window`). On sentence embeddings
most of a vector's length is in its first directions, so ~2-5 % of the rows are left
(``docs/postgres.md``, "Session 26"). Which rows are dropped is decided with every rounding
of the float32 sums and the window's margin included, so the rows left hold every row
:func:`window` keeps over the full product, and the answer is the same, bit for bit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Steps from zero to a row's largest component (int16's largest value).
STEPS = 32_767
#: float32's unit roundoff.
_UNIT = 2.0**-24
#: Rows quantized at a time: their float64 temporaries stay under a megabyte each (a load
#: quantizes 2,048-row chunks; whole chunks took ~30 MB of transients, raising its peak).
BLOCK_ROWS = 256
#: Where the column blocks of a held matrix end (the last one runs to the dimension): a
#: sixth of a 384-value vector each, the last half of it. Of the 22,224 learnings of the
#: 100,000-memory corpus held in their basis, the first 64 directions hold 0.93 of the
#: energy, 128 hold 0.98, 192 hold 0.99; a third stage at 192 left 219 rows at the median
#: and 504 at p90 of 100 questions where two stages left 418 and 1,690 (``/tmp`` probe,
#: session 26: chosen on the questions of seed 8, reported on those of seed 99).
STAGES = (64, 128, 192)
#: Rows from which a held matrix gets a basis of its own and a search is staged (below, one
#: product over every row costs less than a millisecond: nothing to save).
STAGED_ROWS = 4_096
#: Rows multiplied in full for a staged search's threshold, per row asked for.
PROBE_PER_ROW = 2
#: Rows a staged search gathers from a block at a time: each copy stays under glibc's
#: first mmap threshold (128 kB), whose rise after a larger one was freed left ~10 MB more
#: freed heap kept by a worker after 50 searches (session 26).
GATHER_ROWS = 256


def _sum_rounding(dim: int) -> float:
    """Higham's γ for a float32 dot product of ``dim`` terms and one scaling: the relative
    error bound on a sum of products, times the sum of the absolute products."""
    n = (dim + 2) * _UNIT
    return n / (1.0 - n)


Basis = np.ndarray[Any, np.dtype[np.float64]]
Steps = np.ndarray[Any, np.dtype[np.int16]]


@dataclass(frozen=True)
class Quantized:
    """Rows of vectors as int16 steps in column blocks (:data:`STAGES`; in the coordinates
    of a basis, :func:`basis_of`, if one is given): ``steps @ rotated(query) * factor`` is
    each row's cosine with a unit query within ``error`` times the query's length of the
    float32 one (module docstring); ``tails`` each row's scaled steps' length after each
    stage's end (rounded up); ``digest`` a 64-bit digest of each row's stored bytes."""

    blocks: tuple[Steps, ...]
    factor: np.ndarray[Any, np.dtype[np.float32]]
    digest: np.ndarray[Any, np.dtype[np.uint64]]
    error: float
    tails: np.ndarray[Any, np.dtype[np.float32]]


def basis_of(vectors: np.ndarray[Any, Any]) -> Basis:
    """An orthonormal basis (as rows, ``dim`` × ``dim``) whose first directions hold the
    most of the unit rows ``vectors``' energy: the eigenvectors of their Gram matrix by
    decreasing eigenvalue (complete for any number of rows)."""
    wide = vectors.astype(np.float64)
    norms = np.linalg.norm(wide, axis=1)
    wide = wide[norms > 0] / norms[norms > 0, None]
    _, directions = np.linalg.eigh(np.einsum("ji,jk->ik", wide, wide))
    return np.ascontiguousarray(directions[:, ::-1].T)


def rotated(query: np.ndarray[Any, Any], basis: Basis | None) -> np.ndarray[Any, Any]:
    """``query`` in the coordinates of ``basis`` (computed in float64, then float32: each
    value within float32's unit roundoff of the exact one); itself without a basis."""
    if basis is None:
        return np.asarray(query, dtype=np.float32)
    # einsum, as every product here: numpy's matmul hands these sizes to OpenBLAS, whose
    # threads took more CPU and ~30 MB more of a worker's memory (session 26)
    turned: np.ndarray[Any, Any] = np.einsum("ij,j->i", basis, query.astype(np.float64))
    return turned.astype(np.float32)


def blocks_of(steps: Steps) -> tuple[Steps, ...]:
    """``steps`` (rows) as contiguous column blocks, split at :data:`STAGES`."""
    return tuple(np.ascontiguousarray(b) for b in np.split(steps, STAGES, axis=1))


def digests(blobs: Sequence[bytes]) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """A 64-bit digest of each stored vector's bytes (BLAKE2b): equal digests, equal
    vectors, but for a chance of 2⁻⁶⁴ a changed row."""
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "little") for b in blobs),
        dtype=np.uint64,
        count=len(blobs),
    )


def inverse_norms(vectors: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """One over each float32 row's length (0 for a zero row), as the exact search scales
    its products: ``np.linalg.norm`` row by row, a float32 quotient."""
    norms = np.linalg.norm(vectors, axis=1)
    inverse = np.zeros(len(vectors), dtype=np.float32)
    np.divide(1.0, norms, out=inverse, where=norms > 0)
    return inverse


def quantize(
    vectors: np.ndarray[Any, np.dtype[np.float32]],
    blobs: Sequence[bytes],
    basis: Basis | None = None,
    into: Quantized | None = None,
) -> Quantized:
    """The float32 rows ``vectors`` (stored as ``blobs``) as :class:`Quantized`, in the
    coordinates of ``basis`` if given (written into ``into``'s arrays, as many rows as
    ``vectors`` has, if given), :data:`BLOCK_ROWS` rows at a time."""
    n, dim = vectors.shape
    if into is None:
        into = Quantized(
            blocks_of(np.empty((n, dim), dtype=np.int16)), np.empty(n, dtype=np.float32),
            np.empty(0, dtype=np.uint64), 0.0, np.empty((n, len(STAGES)), dtype=np.float32),
        )  # fmt: skip
    error = 0.0
    for start in range(0, n, BLOCK_ROWS):
        rows = slice(start, min(start + BLOCK_ROWS, n))
        error = max(error, _quantize(vectors[rows], basis, into, rows))
    return Quantized(into.blocks, into.factor, digests(blobs), error, into.tails)


def _quantize(
    vectors: np.ndarray[Any, np.dtype[np.float32]],
    basis: Basis | None,
    into: Quantized,
    rows: slice,
) -> float:
    """Write the steps, factors and tails of the float32 rows ``vectors`` into ``into``'s
    ``rows``; the rows' error bound."""
    stored = vectors.astype(np.float64)
    if basis is not None:
        stored = np.einsum("ik,jk->ij", stored, basis)  # the vectors in the basis's coordinates
    largest = np.abs(stored).max(axis=1) if stored.size else np.zeros(len(stored))
    scale = np.where(largest > 0, largest / STEPS, 1.0)
    wide = np.rint(stored / scale[:, None])
    at = 0
    for block, end in zip(into.blocks, (*STAGES, vectors.shape[1]), strict=True):
        block[rows] = wide[:, at:end]
        at = end
    inverse = inverse_norms(vectors)
    into.factor[rows] = scale * inverse
    # exactly how far each row's steps, scaled as they are multiplied, are from the
    # vector the exact search scales (both as cosines with a unit query), and how large
    # either product can be (the float32 sums' rounding is relative to it)
    wide *= into.factor[rows, None]
    stored *= inverse[:, None].astype(np.float64)
    for i, end in enumerate(STAGES):
        # rounded up to float32: still at least the length
        tail = np.linalg.norm(wide[:, end:], axis=1)
        into.tails[rows, i] = np.nextafter(tail.astype(np.float32), np.float32(np.inf))
    apart = np.linalg.norm(wide - stored, axis=1)
    size = np.linalg.norm(wide, axis=1) + np.linalg.norm(stored, axis=1)
    bound = apart + _sum_rounding(vectors.shape[1]) * size
    if basis is not None:
        # the query rotated and rounded to float32 (within the unit roundoff of each
        # value) and the basis orthonormal to float64's precision: both moved inside
        bound = bound * (1.0 + 4 * _UNIT) + 2 * _UNIT * np.linalg.norm(stored, axis=1) + 1e-12
    return float(bound.max()) if len(bound) else 0.0


def approximate(
    blocks: Sequence[Steps],
    factor: np.ndarray[Any, np.dtype[np.float32]],
    query: np.ndarray[Any, np.dtype[np.float32]],
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Each row's approximate cosine with ``query`` (already :func:`rotated` into the rows'
    basis; a float32 array of its own)."""
    # einsum casts the int16 rows to float32 a buffer at a time: one core's SIMD loop over
    # half the bytes of a float32 matrix (~3.5 against ~3.8 ms at 22,000 x 384, /tmp probe)
    first = query[: STAGES[0]]
    scores: np.ndarray[Any, np.dtype[np.float32]] = np.einsum("ij,j->i", blocks[0], first)
    for block, start in zip(blocks[1:], STAGES, strict=True):
        scores += np.einsum("ij,j->i", block, query[start : start + block.shape[1]])
    scores *= factor
    return scores


def staged_window(
    held: Quantized,
    query: np.ndarray[Any, np.dtype[np.float32]],
    k: int,
    dropped: np.ndarray[Any, np.dtype[np.intp]],
    length: float,
) -> tuple[np.ndarray[Any, np.dtype[np.intp]], np.ndarray[Any, np.dtype[np.float32]]]:
    """:func:`window` over every row's :func:`approximate` score but the ``dropped`` ones
    (at least ``k`` left), and those rows' scores, with only the rows that can be in it
    multiplied in full (module docstring): ``query`` rotated into the rows' basis,
    ``length`` the unrotated query's length."""
    first = held.blocks[0]
    n = len(first)
    left = n - dropped.size
    margin = 2.0 * held.error * length
    # every float32 sum's rounding, for a partial, a full or a probe's product (each within
    # _sum_rounding of the exact sum of its terms, whose sizes add up to at most the scaled
    # steps' length, 1 + error, times the rotated query's length), and the few more
    # roundings of a bound's float32 products and sums (a unit roundoff each, relative to
    # the same size)
    size = float(np.linalg.norm(query.astype(np.float64)))
    rounding = (4.0 * _sum_rounding(len(query)) + 16 * _UNIT) * (1.0 + held.error) * size
    slack = rounding + margin + 1e-12
    # float32 throughout, in place: a search's temporaries are a few arrays of four bytes a
    # row (float64 ones and an index of every row left glibc keeping ~10 MB more freed
    # heap after 50 searches, session 26)
    partial = np.einsum("ij,j->i", first, query[: STAGES[0]])
    partial *= held.factor
    partial[dropped] = -np.inf
    # the rows of the best partial products (by value, no index array of every row)
    wanted = min(PROBE_PER_ROW * k, left)
    probe = np.flatnonzero(partial >= np.partition(partial, n - wanted)[n - wanted])
    probed = _full(held, probe, query)
    reached = float(-np.partition(-probed, k - 1)[k - 1]) - slack  # some k rows reach it
    # as a float32 no greater (a float32 array is compared with a float32)
    floor = np.nextafter(np.float32(reached), np.float32(-np.inf))
    bound = held.tails[:, 0] * np.float32(_rest(query, STAGES[0]))
    bound += partial
    alive = np.flatnonzero(bound >= floor)
    del bound
    part = partial[alive]
    for stage in range(1, len(STAGES)):
        start, end = STAGES[stage - 1], STAGES[stage]
        more = _gathered(held.blocks[stage], alive, query[start:end])
        more *= held.factor[alive]
        part += more
        keep = held.tails[alive, stage] * np.float32(_rest(query, end)) + part >= floor
        alive, part = alive[keep], part[keep]
    scores = _full(held, alive, query)
    rows = window(scores, k, held.error, length)
    return alive[rows], scores[rows]


def _gathered(
    block: Steps, rows: np.ndarray[Any, np.dtype[np.intp]], query: np.ndarray[Any, Any]
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The products of ``block``'s ``rows`` with ``query``, :data:`GATHER_ROWS` at a time."""
    out = np.empty(len(rows), dtype=np.float32)
    for start in range(0, len(rows), GATHER_ROWS):
        part = rows[start : start + GATHER_ROWS]
        out[start : start + len(part)] = np.einsum("ij,j->i", block[part], query)
    return out


def _full(
    held: Quantized, rows: np.ndarray[Any, np.dtype[np.intp]], query: np.ndarray[Any, Any]
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """:func:`approximate` of ``held``'s ``rows`` (the same sums: each block's, added, then
    scaled)."""
    scores = _gathered(held.blocks[0], rows, query[: STAGES[0]])
    for block, start in zip(held.blocks[1:], STAGES, strict=True):
        scores += _gathered(block, rows, query[start : start + block.shape[1]])
    scores *= held.factor[rows]
    return scores


def _rest(query: np.ndarray[Any, Any], start: int) -> float:
    """The length of ``query`` after its first ``start`` values."""
    return float(np.linalg.norm(query[start:].astype(np.float64)))


def window(
    scores: np.ndarray[Any, np.dtype[np.float32]], k: int, error: float, length: float
) -> np.ndarray[Any, np.dtype[np.intp]]:
    """The rows that may be among the ``k`` best by exact score, given ``scores`` from
    :func:`approximate` (rows left out at −inf, at least ``k`` finite), the rows' bound
    ``error`` and the query's length: those within twice the bound of the k-th best."""
    kth = float(-np.partition(-scores, k - 1)[k - 1])
    margin = 2.0 * error * length
    # compared in float64: a float32 threshold could round up past a candidate
    return np.flatnonzero(scores >= np.float64(kth - margin))


def exact_top(
    query: np.ndarray[Any, np.dtype[np.float32]],
    k: int,
    vectors: np.ndarray[Any, np.dtype[np.float32]],
    seq: np.ndarray[Any, np.dtype[np.int64]],
) -> list[tuple[int, float]]:
    """The ``k`` rows of the float32 ``vectors`` most cosine-similar to the unit ``query``,
    best first, ties by ``seq`` (the SQL exact search's order), as (row, similarity): the
    same float32 arithmetic, row by row, as a product over every stored vector."""
    if not len(vectors) or k <= 0:
        return []
    scores: np.ndarray[Any, np.dtype[np.float32]] = np.einsum("ij,j->i", vectors, query)
    scores *= inverse_norms(vectors)
    k = min(k, len(scores))
    part = np.argpartition(-scores, k - 1)[:k]
    # every row tied with the k-th is a candidate, so ties break by seq as in SQL
    rows = np.flatnonzero(scores >= scores[part].min())
    order = np.lexsort((seq[rows], -scores[rows]))[:k]
    return [(int(r), float(scores[r])) for r in rows[order]]
