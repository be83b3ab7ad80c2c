"""The words of newly ingested conversation chunks, embedded off the question's path (issue 15).

``recall.soft_terms`` meets a question's words with the nearest word of each conversation
chunk, by the words' MiniLM vectors. Made at the first question that needs them, a
conversation's ~1,000-2,000 words cost that question 1-2 s of CPU (a word is one model run,
~1 ms: batching single words saves little, the model's arithmetic is the cost). So the
vectors are made where a cost is expected anyway, at ingest: for a model without a word
table (``embed.word_table``; the default model has one, and then nothing is queued) when
a soft-terms weight is set (``GateOptions.soft_terms``), after a call stores conversation
chunks, their words go to a per-engine :class:`WordBacklog`, and one job on the engine's
background thread (``background.Worker``, the thread compression and tier
compiles run on; the ingest call never waits for it) embeds the words the process does not
hold yet through the engine's ``CachedEmbedder``: a word the store's embedding cache holds
is read from it, any other embedded once and written to it. A reopened store therefore
embeds nothing again; a question that comes before the job has run embeds the words it
needs itself (the same vectors; the store keeps the first).

Concurrency: the backlog is a set of words under a lock; ``add`` from any ingest thread,
``drain`` from the background thread (a job keyed ``("words",)``: a request made while it
runs runs it once more, so no word added meanwhile waits for the next ingest).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from engrain.embed.word_table import TABLE_MODELS
from engrain.model import Memory
from engrain.recall import soft_terms
from engrain.recall.soft_terms import EmbedBatch, WordVectors, words_of_texts


class WordBacklog:
    """Words of stored conversation chunks waiting for their vectors, per engine."""

    def __init__(
        self, model_id: str, embed: EmbedBatch, words_of: WordVectors | None = None
    ) -> None:
        """``embed``: the engine's store-cached batch embedder (``CachedEmbedder.embed``);
        ``words_of``: the word vectors the question path reads (the process's,
        ``soft_terms.WORDS``, by default)."""
        self._model_id = model_id
        self._embed = embed
        self._words_of = words_of if words_of is not None else soft_terms.WORDS
        self._waiting: dict[str, None] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def wanted(self, setting: float | None) -> bool:
        """Whether soft terms set to ``setting`` (``GateOptions.soft_terms``) read words
        run through the model: a weight is set and the model has no word table."""
        return setting is not None and setting > 0.0 and self._model_id not in TABLE_MODELS

    def add(self, texts: Iterable[str]) -> bool:
        """Queue the content words of ``texts`` the process does not hold; whether any
        word now waits (then a :meth:`drain` is due)."""
        words = self._words_of.missing(self._model_id, words_of_texts(texts))
        with self._lock:
            self._waiting.update(dict.fromkeys(words))
            return bool(self._waiting)

    def add_chunks(self, memories: Iterable[Memory]) -> bool:
        """:meth:`add` of the contents of the conversation chunks among ``memories`` (those
        that carry the turns they come from; typed learnings queue nothing)."""
        chunks = [m.content for m in memories if m.provenance.turn_ids]
        return bool(chunks) and self.add(chunks)

    def drain(self) -> int:
        """Make the vectors of every waiting word (read from the store's cache, or embedded
        and written to it) and keep them in the process's table; how many words it took."""
        with self._lock:
            words, self._waiting = list(self._waiting), {}
        if words:
            self._words_of.matrix(self._model_id, words, self._embed)
        return len(words)
