"""The BM25 weights of a large user's long posting lists, kept once computed.

A query term's weight in a document, ``idf × tf × (K1 + 1) / (tf + norm)``, is computed for
every posting of the term at every query (``store/lexical.py``): decoding the documents'
frequencies, gathering their length norms and the arithmetic are ~40 % of a BM25 top k at
a million memories, where a benchmark query's terms hold ~390,000 postings, most of them
in the few lists of the user's common words. Those weights depend only on the index (its
size and mean length: an index is immutable and a write makes a new one), so an index keeps
the weights of its lists of at least :data:`MIN_POSTINGS` documents once a query has
computed them, the most recently used first, within :data:`MAX_BYTES`. The weights kept are
the array a query computed, so every score is the same, bit for bit.

Threads share an index: the table is changed under its lock, and a kept array is read-only.
Two threads computing the same term's weights at once both compute them and keep one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

#: A term's weights are kept if its list holds at least this many documents: at a million
#: memories the 221 lists this long hold 23.0 of the index's 30.4 million postings, and at
#: 100,000 memories no list of the benchmark's corpus is this long (the commonest term is in
#: 28 % of the memories), so a smaller user keeps nothing.
MIN_POSTINGS = 65_536
#: The kept weights of one index take at most this many bytes (float32: ~16.7 million
#: postings). The benchmark's 200 queries at a million memories use 89 long lists, 40 MB.
MAX_BYTES = 64 * 1024 * 1024

Weights = npt.NDArray[np.float32]


class KeptWeights:
    """Term → the weights of its postings (in list order), least recently used dropped
    first once more than ``max_bytes`` are held."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._max_bytes = max_bytes
        self._held: OrderedDict[str, Weights] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """The bytes of the weights held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._held)

    def get(self, term: str) -> Weights | None:
        """The weights kept for ``term``, or ``None``."""
        with self._lock:
            found = self._held.get(term)
            if found is not None:
                self._held.move_to_end(term)
            return found

    def keep(self, term: str, weights: Weights) -> None:
        """Keeps ``weights`` for ``term`` (made read-only), dropping the least recently used
        until they fit; weights larger than the whole budget are not kept."""
        size = int(weights.nbytes)
        if size > self._max_bytes:
            return
        weights.flags.writeable = False
        with self._lock:
            if term in self._held:
                return
            while self._held and self._bytes + size > self._max_bytes:
                _, dropped = self._held.popitem(last=False)
                self._bytes -= int(dropped.nbytes)
            self._held[term] = weights
            self._bytes += size
