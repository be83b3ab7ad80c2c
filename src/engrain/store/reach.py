"""Which candidates of an int8 search can still be among the k best by exact score
(issue 18, session 12).

A large user's approximate search picks candidates by the cosine of int8 vectors (the
usearch index's, or a filter's int8 codes, ``store/cache.py``) and scores them exactly
with float32 vectors read from the store's rows: a read per candidate (~270 at 1,000,000
memories, 4 ms of a call). Most cannot win: if every int8 cosine is within
:data:`INT8_ERROR` of the exact one, the k candidates with int8 cosine at least ``T`` (the
k-th best) have exact scores at least ``T - INT8_ERROR``, so a candidate below
``T - 2 × INT8_ERROR`` by int8 has an exact score below all k of them and is never among
the k best; it need not be read. The result is the same as scoring every candidate for
errors up to the bound; a larger error only loses a near-tie at the k-th place.

The bound is measured, with a reason: a component of a unit vector times 127 is truncated
(an error below one step of 1/127 each), and the cosine of two such vectors sums 384 such
errors, which are nearly independent: on the 100,000-memory corpus (the model's vectors,
200 queries × their 1,000 nearest) the error's median is 0.0033 (σ ≈ 0.005), its 99.99th
percentile 0.018 and its maximum 0.024; at 1,000,000 memories the maximum over 55,000
candidate pairs was 0.019 (docs/scale.md, "Session 11"). Two errors summing to more than
``2 × INT8_ERROR`` (0.05, ~7σ of the sum) is what a skipped candidate needs to be wrong.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from engrain.store.ann import quantized

BoolArray = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float32]

#: A bound on |int8 cosine − exact cosine| for unit vectors of 384 dimensions (see the
#: module docstring).
INT8_ERROR = 0.025


def reachable(similarities: Floats, k: int, error: float = INT8_ERROR) -> BoolArray:
    """For candidates with these int8 ``similarities``, which may be among the ``k`` best by
    exact score (every one when there are at most ``k``): those within ``2 × error`` of the
    k-th best."""
    count = len(similarities)
    if k <= 0:
        return np.zeros(count, dtype=bool)
    if count <= k:
        return np.ones(count, dtype=bool)
    kth = np.partition(similarities, count - k)[count - k]
    result: BoolArray = similarities >= kth - 2.0 * error
    return result


def similarities(codes: npt.NDArray[np.int8], query: Floats) -> Floats:
    """The cosine of each int8 row of ``codes`` (:func:`~engrain.store.ann.quantized`
    vectors) with ``query`` quantized the same way, as usearch computes it for an int8
    index (0 for a zero row)."""
    if not len(codes):
        return np.zeros(0, dtype=np.float32)
    wide = codes.astype(np.float32)
    q = quantized(np.asarray(query, dtype=np.float32).reshape(1, -1))[0].astype(np.float32)
    norms = np.linalg.norm(wide, axis=1) * float(np.linalg.norm(q))
    dots = wide @ q
    out: Floats = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    return out
