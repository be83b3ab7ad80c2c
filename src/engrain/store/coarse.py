"""A coarse pass before the exact product over a large filter's rows (issue 18).

A large user's learnings (22,224 of 100,000 memories in the latency corpus) are searched
exactly over a float32 copy of their vectors made once per set of columns
(``store/cache.py``, ``_subset``): a product over 34 MB per ``context()`` call, 2.6 ms of
its ~19 on one core, memory-bound. A :class:`Projection` keeps the same rows' coordinates
on the ``DIMS`` principal directions of their vectors (128 of 384: 11 MB at 22,224 rows,
95 % of the vectors' energy); a search scores every row on those first, keeps the
``fetch`` best, and scores those exactly with their float32 vectors. The results are
exact scores of exact vectors; only *which* rows are scored exactly is approximate
(R@100 against the full product: docs/scale.md, "Session 9").

The directions are the top eigenvectors of an evenly spaced sample's second-moment matrix
(uncentred: a dot product keeps the vectors' common direction), computed once and reused
for the next copy of the same filter's rows (any orthonormal basis keeps the scores
exact; a stale one only picks candidates a little worse). A projection is immutable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
Rows = npt.NDArray[np.intp]

#: Rows from which a filter's copy gets a projection (below, the full product is ~1 ms).
MIN_ROWS = 8_192
#: Principal directions kept.
DIMS = 128
#: Candidates scored exactly per result asked: ``max(FETCH_FACTOR × k, FETCH_MIN)``.
FETCH_FACTOR = 3
FETCH_MIN = 256
#: Rows sampled (evenly spaced) to find the directions.
SAMPLE = 4_096


def basis_of(vectors: Matrix, dims: int | None = None, sample: int | None = None) -> Matrix:
    """The ``dims`` (default :data:`DIMS`) principal directions (uncentred) of ``vectors``,
    as orthonormal rows (``dims × dim``), from at most ``sample`` (default :data:`SAMPLE`)
    evenly spaced rows."""
    dims = DIMS if dims is None else dims
    sample = SAMPLE if sample is None else sample
    step = max(1, len(vectors) // sample)
    picked = np.asarray(vectors[::step][:sample], dtype=np.float64)
    moments = picked.T @ picked
    _, directions = np.linalg.eigh(moments)  # ascending eigenvalues
    top = directions[:, ::-1][:, : min(dims, vectors.shape[1])]
    basis: Matrix = np.ascontiguousarray(top.T, dtype=np.float32)
    basis.flags.writeable = False
    return basis


@dataclass(frozen=True)
class Projection:
    """The coordinates of a fixed set of vectors on ``basis``'s directions."""

    basis: Matrix
    coords: Matrix

    @classmethod
    def of(cls, vectors: Matrix, basis: Matrix | None = None) -> Projection:
        """``vectors`` projected on ``basis`` (by default: their own principal
        directions)."""
        if basis is None:
            basis = basis_of(vectors)
        coords: Matrix = np.ascontiguousarray(vectors @ basis.T, dtype=np.float32)
        coords.flags.writeable = False
        return cls(basis, coords)

    def candidates(self, query: npt.NDArray[np.float32], k: int) -> Rows | None:
        """The rows (positions in the vectors projected) worth scoring exactly for the
        ``k`` best matches of ``query``: the :func:`fetch` best by their projected scores;
        ``None`` when that would be a large share of the rows (score them all)."""
        count = fetch(k)
        if k <= 0 or count * 4 > len(self.coords):
            return None
        rough = self.coords @ (self.basis @ query)
        return np.argpartition(-rough, count - 1)[:count]


def fetch(k: int) -> int:
    """Candidates scored exactly for ``k`` results."""
    return max(FETCH_FACTOR * k, FETCH_MIN)
