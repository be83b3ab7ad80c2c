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


def _sum_rounding(dim: int) -> float:
    """Higham's γ for a float32 dot product of ``dim`` terms and one scaling: the relative
    error bound on a sum of products, times the sum of the absolute products."""
    n = (dim + 2) * _UNIT
    return n / (1.0 - n)


@dataclass(frozen=True)
class Quantized:
    """Rows of vectors as int16 steps: ``steps @ query * factor`` is each row's cosine with a
    unit query within ``error`` times the query's length of the float32 one (module
    docstring); ``digest`` a 64-bit digest of each row's stored bytes."""

    steps: np.ndarray[Any, np.dtype[np.int16]]
    factor: np.ndarray[Any, np.dtype[np.float32]]
    digest: np.ndarray[Any, np.dtype[np.uint64]]
    error: float


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
    steps: np.ndarray[Any, np.dtype[np.int16]] | None = None,
) -> Quantized:
    """The float32 rows ``vectors`` (stored as ``blobs``) as :class:`Quantized` (their steps
    written into ``steps`` if given), :data:`BLOCK_ROWS` rows at a time."""
    if steps is None:
        steps = np.empty(vectors.shape, dtype=np.int16)
    factor = np.empty(len(vectors), dtype=np.float32)
    error = 0.0
    for start in range(0, len(vectors), BLOCK_ROWS):
        block = slice(start, start + BLOCK_ROWS)
        error = max(error, _quantize(vectors[block], steps[block], factor[block]))
    return Quantized(steps, factor, digests(blobs), error)


def _quantize(
    vectors: np.ndarray[Any, np.dtype[np.float32]],
    steps: np.ndarray[Any, np.dtype[np.int16]],
    factor: np.ndarray[Any, np.dtype[np.float32]],
) -> float:
    """Write the steps and factors of the float32 rows ``vectors``; the rows' error bound."""
    wide = vectors.astype(np.float64)
    largest = np.abs(wide).max(axis=1) if wide.size else np.zeros(len(wide))
    scale = np.where(largest > 0, largest / STEPS, 1.0)
    np.rint(wide / scale[:, None], out=wide)
    steps[...] = wide
    inverse = inverse_norms(vectors)
    factor[...] = scale * inverse
    # exactly how far each row's steps, scaled as they are multiplied, are from the
    # vector the exact search scales (both as cosines with a unit query), and how large
    # either product can be (the float32 sums' rounding is relative to it)
    wide *= factor[:, None]
    stored = vectors.astype(np.float64) * inverse[:, None].astype(np.float64)
    apart = np.linalg.norm(wide - stored, axis=1)
    size = np.linalg.norm(wide, axis=1) + np.linalg.norm(stored, axis=1)
    bound = apart + _sum_rounding(vectors.shape[1]) * size
    return float(bound.max()) if len(bound) else 0.0


def approximate(
    steps: np.ndarray[Any, np.dtype[np.int16]],
    factor: np.ndarray[Any, np.dtype[np.float32]],
    query: np.ndarray[Any, np.dtype[np.float32]],
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Each row's approximate cosine with ``query`` (a float32 array of its own)."""
    # einsum casts the int16 rows to float32 a buffer at a time: one core's SIMD loop over
    # half the bytes of a float32 matrix (~3.5 against ~3.8 ms at 22,000 x 384, /tmp probe)
    scores: np.ndarray[Any, np.dtype[np.float32]] = np.einsum("ij,j->i", steps, query)
    scores *= factor
    return scores


def window(
    scores: np.ndarray[Any, np.dtype[np.float32]], k: int, error: float, query: np.ndarray[Any, Any]
) -> np.ndarray[Any, np.dtype[np.intp]]:
    """The rows that may be among the ``k`` best by exact score, given ``scores`` from
    :func:`approximate` (rows left out at −inf, at least ``k`` finite) and the rows' bound
    ``error``: those within twice the bound of the k-th best."""
    kth = float(-np.partition(-scores, k - 1)[k - 1])
    margin = 2.0 * error * float(np.linalg.norm(query.astype(np.float64)))
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
