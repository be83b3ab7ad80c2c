"""A second approximate index over a large user's typed learnings (issue 18, session 12).

Every ``context()`` call searches the user's typed learnings (invariants, patterns,
decisions, preferences…: ``recall/gate.py``'s ``LEARNING_KINDS``) for their 100 nearest
beside the candidate pool. A user with few of them searches them exactly over a copy of
their rows (``store/vector_search.py``, ``subset_of``); at 1,000,000 memories they are ~220,000
rows, and were searched by one walk of the whole graph 920 candidates wide (over-fetched
for the 22 % of the rows that pass), ~5.4 ms of a call's CPU. A user with at least
:data:`MIN_ROWS` of them gets a second usearch index holding only those rows, kept like
the first (an :class:`~engrain.store.ann.IndexSlot` of its own, saved beside the file as
the derived index ``usearch-learnings``, loaded and checked row by row against the
store's vectors, patched or rebuilt off the request path): a filter whose kinds are all
among :data:`INDEXED_KINDS` walks it instead, ~k + 16 candidates wide.

It is an accelerator like the first: its candidates are mapped onto the reader's
snapshot by key (a forgotten memory is not there), kept if they pass the filter and the
snapshot's record says it holds their current vector, scored exactly, and merged with an
exact search of the rows passing that it does not hold (written, re-embedded or turned
into a learning since).
"""

from __future__ import annotations

from engrain.model import Kind
from engrain.store.ann import ANN_MIN_VECTORS
from engrain.store.base import MemoryFilter

#: The kinds the second index holds: the gate's typed learnings (a test holds them equal).
INDEXED_KINDS: frozenset[Kind] = frozenset({
    Kind.INVARIANT, Kind.PATTERN, Kind.DECISION, Kind.ANTIPATTERN, Kind.GOLDEN_PATH,
    Kind.PREFERENCE, Kind.CORRECTION,
})  # fmt: skip
#: The rows it holds, as a filter.
FILTER = MemoryFilter(kinds=tuple(sorted(INDEXED_KINDS, key=lambda kind: kind.value)))
#: Rows of those kinds with a vector from which the second index is kept (for the first
#: index's default threshold): where a copy of their vectors would need a coarse
#: projection to be searched fast (``store/coarse.py``; 22,224 rows at 100,000 memories:
#: the copy and projection 43.5 MB, this index ~12 MB). Fewer are searched exactly over
#: such a copy (``store/vector_search.py``, ``subset_of``).
MIN_ROWS = 8_192
#: Candidates asked of it per result at least (``store/vector_search.py``'s over-fetch): asked
#: for k + 16, its walk finds the exact 100 best of 221,154 learnings at 1,000,000
#: memories with R@100 0.983; 1.5 × k + 16 (from the same beam: usearch's expansion 256,
#: every candidate scored exactly) 0.991, and 2 × k + 16 no more (100 queries).
OVERFETCH = 1.5
#: Its name among the user's derived indexes.
STASH_KIND = "usearch-learnings"


def covers(flt: MemoryFilter) -> bool:
    """Whether every row passing ``flt`` is of a kind the second index holds."""
    return bool(flt.kinds) and set(flt.kinds or ()) <= INDEXED_KINDS


def min_rows(min_vectors: int) -> int:
    """Rows of the indexed kinds from which a user gets the second index, when the first
    is kept from ``min_vectors`` vectors: :data:`MIN_ROWS` at the default threshold, in
    proportion below it (a store that lowers the first's, as tests and the reliability
    scripts do with ``ENGRAIN_ANN_MIN_VECTORS=0``, gets the second for a few rows too),
    at least one."""
    return max(1, MIN_ROWS * min_vectors // ANN_MIN_VECTORS)
