"""A question's words met by their nearest word in a conversation chunk (issue 15).

A list question names a category and the turn names an instance of it: "What exercises has
John done?" against "I'm doing kickboxing", "What instruments does Melanie play?" against
"playing my violin". BM25 has no shared term to match, and the chunk's one MiniLM vector
is mostly about the rest of the chunk (greetings, the other speaker's reply), so the turn
ranks far down. Single words are a different matter: MiniLM's vector of "instruments" is
close to "violin" (cosine 0.63), "exercises" to "yoga" (0.59), "art" to "painting" (0.71),
while unrelated words sit near 0.1–0.2.

So each conversation chunk of the pool gets a *soft coverage* of the question: every
content word of the question (not a stopword, not a capitalised name after the first word:
names are matched exactly by BM25 and speakers by ``recall.speakers``) is met by the
chunk's word nearest to it (cosine of the two words' vectors; a word the chunk holds
literally meets itself at 1), and the coverage is the mean over the question's words.
Any text has some word loosely related to any word, so only a chunk's coverage above the
pool's median chunk counts:

    score = relevance + w × max(0, coverage − median coverage of the pool's chunks)

with ``w`` = :data:`SOFT_TERMS_WEIGHT`. Like ``recall.chunk_rank``, the score only
*orders*: the conversation chunks are given the pool's relevance values again in the new
order, so every threshold, the automatic budget and every other memory's place mean what
they meant. It runs before ``recall.chunk_rank``, whose session rule then reads the new
order. Nothing changes for a pool with fewer than two conversation chunks (a project
memory without transcripts pays nothing) or for a question without a content word.

No list of categories is written anywhere: the relation comes from the embedding model
itself. ``w`` was chosen on LoCoMo's half A (``docs/decisions.md``).

The words' vectors come from the embedding model's word table (``embed.word_table``: the
model's vector of each vocabulary token embedded alone, shipped with engrain; a word is
the mean of its tokens' rows), so no word costs a model run, at ingest or at a question.
``GateOptions.soft_terms`` None (automatic) runs the rule at :data:`SOFT_TERMS_WEIGHT` for
a model with a table and not for any other (see :data:`SOFT_TERMS_DEFAULT`). A model
without a table runs the rule only when a weight is set: the words are then the model's
embeddings of the words as texts, living where every text's vector lives, the store's
content-hash embedding cache (``CachedEmbedder``), made at ingest by ``recall.word_backlog``
(~1 ms of CPU a word, each word once per store) so a question embeds only its own new
words. Either way the vectors are read once per process into :class:`WordVectors` (at
most :data:`MAX_WORDS` words, ~25 MB; a LoCoMo conversation has 1,000-1,700 distinct
words, the development split 4,813; a full table starts afresh), the table's in a
namespace of their own.

Concurrency: the word table is read-only once loaded (``embed.word_table``);
:class:`WordVectors` reads and writes its table under a lock and embeds
outside it (two threads missing the same word both embed it and store equal vectors; the
store's cache keeps the first); the rest are pure functions of their arguments, a chunk's
words cached per content string (``functools.lru_cache``, thread-safe).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from itertools import chain

import numpy as np
import numpy.typing as npt

from engrain.embed.cache import CachedEmbedder
from engrain.embed.word_table import table_words
from engrain.recall.relevance import Candidate
from engrain.recall.rescored import reordered
from engrain.store.lexical import STOPWORDS

#: How much a chunk's soft coverage above the pool's median counts in its order when the
#: rule is on (tuned on LoCoMo's half A among 0.3 / 0.4 / 0.5 / 0.6).
SOFT_TERMS_WEIGHT = 0.5
#: ``GateOptions.soft_terms`` by default: 0, off. None is automatic:
#: :data:`SOFT_TERMS_WEIGHT` with the model's word table (``embed.word_table``: no model run
#: for a word; alone, LoCoMo R@10 +0.005 on half A, +0.004 on B), off for a model without
#: one (whose words would cost a model run each at ingest: +30% of LoCoMo's ingest CPU,
#: session 13); a number is that weight whatever the model. Off because with the search
#: without names on (``recall.unnamed``, session 14) it adds nothing: R@10 0.829 with it,
#: 0.830 without (A 0.845 / 0.847, B 0.813 / 0.813), auto 0.852 / 0.856 (docs/decisions.md).
SOFT_TERMS_DEFAULT: float | None = 0.0
#: The most word vectors a process keeps per model.
MAX_WORDS = 16_384
#: The most chunk texts whose word rows a process keeps per model (~0.7 KB a text with
#: its ~30 rows and the text itself, which the entry keeps alive: ~6 MB when full; a
#: LoCoMo conversation has ~300 chunks, a transcript question's pool 125).
MAX_TEXTS = 8_192

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")

#: A batch embedder: texts → one unit-length row per text.
EmbedBatch = Callable[[Sequence[str]], npt.ArrayLike]


def _word(raw: str) -> str | None:
    """``raw`` lower-cased without edge quotes or hyphens; None for a stopword or a word
    under three letters."""
    word = raw.lower().strip("'-")
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) < 3 or word in STOPWORDS:
        return None
    return word


def question_words(message: str) -> tuple[str, ...]:
    """The content words of ``message``, in order and distinct: no stopwords, no
    capitalised word after the first (a name)."""
    out: dict[str, None] = {}
    for match in _WORD.finditer(message):
        raw = match.group(0)
        if match.start() > 0 and raw[0].isupper():
            continue
        word = _word(raw)
        if word is not None:
            out[word] = None
    return tuple(out)


@functools.lru_cache(maxsize=65_536)
def chunk_words(content: str) -> tuple[str, ...]:
    """The distinct content words of a chunk's text (names included: a question's word
    can only meet them at a low cosine)."""
    out: dict[str, None] = {}
    for raw in _WORD.findall(content):
        word = _word(raw)
        if word is not None:
            out[word] = None
    return tuple(out)


class WordVectors:
    """One process's vectors of single words: per model id, a table of word → row of one
    matrix. A model's table that would pass ``capacity`` words is started afresh (a
    word's vector is the same whenever it is embedded, so this only costs embedding again)."""

    def __init__(self, capacity: int = MAX_WORDS) -> None:
        self.capacity = capacity
        self._rows: dict[str, dict[str, int]] = {}
        self._matrix: dict[str, npt.NDArray[np.float32]] = {}
        #: per model, a chunk text → the rows of its words (valid until the table starts
        #: afresh; rows are never moved otherwise)
        self._texts: dict[str, dict[str, npt.NDArray[np.intp]]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return sum(len(rows) for rows in self._rows.values())

    def missing(self, model_id: str, words: Sequence[str]) -> list[str]:
        """Those of ``words`` whose vectors the table does not hold."""
        with self._lock:
            rows = self._rows.get(model_id, {})
            return [w for w in words if w not in rows]

    def matrix(
        self, model_id: str, words: Sequence[str], embed: EmbedBatch
    ) -> npt.NDArray[np.float32]:
        """The vectors of the distinct ``words`` (one row each, in order): the known ones
        from the table, the others embedded in one batch and kept."""
        if not words:
            return np.zeros((0, 0), dtype=np.float32)
        with self._lock:
            rows = self._rows.get(model_id, {})
            missing = [w for w in words if w not in rows]
        if missing:
            fresh = np.asarray(embed(missing), dtype=np.float32)
            with self._lock:
                self._keep(model_id, missing, fresh)
        with self._lock:
            rows = self._rows[model_id]
            if not all(map(rows.__contains__, words)):  # started afresh meanwhile: all anew
                self._rows[model_id] = {}
                self._texts.pop(model_id, None)
                self._keep(model_id, list(words), np.asarray(embed(words), dtype=np.float32))
                rows = self._rows[model_id]
            at = np.fromiter(map(rows.__getitem__, words), dtype=np.intp, count=len(words))
            return self._matrix[model_id][at]

    def rows_of(
        self, model_id: str, asked: Sequence[str], texts: Sequence[str], embed: EmbedBatch
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.intp], list[npt.NDArray[np.intp]]] | None:
        """The table's matrix, the rows of the ``asked`` words in it, and for each of
        ``texts`` the rows of its words (:func:`chunk_words`), the words the table lacks
        embedded first; a text's rows are kept (up to :data:`MAX_TEXTS` texts), so a chunk
        met again costs no word lookup. None when the table started afresh meanwhile
        (another thread filled it): the caller asks :meth:`matrix` instead."""
        with self._lock:
            known = self._texts.get(model_id, {})
            todo = [t for t in texts if t not in known]
        wanted = dict.fromkeys(chain(asked, chain.from_iterable(map(chunk_words, todo))))
        absent = self.missing(model_id, list(wanted))
        if absent:
            fresh = np.asarray(embed(absent), dtype=np.float32)
            with self._lock:
                self._keep(model_id, absent, fresh)
        with self._lock:
            rows = self._rows.get(model_id, {})
            kept = self._texts.setdefault(model_id, {})
            try:
                asked_rows = np.fromiter(map(rows.__getitem__, asked), np.intp, len(asked))
                per_text = []
                for text in texts:
                    at = kept.get(text)
                    if at is None:
                        words = chunk_words(text)
                        at = np.fromiter(map(rows.__getitem__, words), np.intp, len(words))
                        if len(kept) >= MAX_TEXTS:
                            kept.clear()
                        kept[text] = at
                    per_text.append(at)
            except KeyError:
                return None
            return self._matrix[model_id], asked_rows, per_text

    def _keep(self, model_id: str, words: Sequence[str], vectors: npt.NDArray[np.float32]) -> None:
        """Add ``words``' ``vectors`` to ``model_id``'s table (the lock held)."""
        rows = self._rows.setdefault(model_id, {})
        new = [(w, v) for w, v in zip(words, vectors, strict=True) if w not in rows]
        if len(rows) + len(new) > self.capacity:
            rows.clear()
            self._texts.pop(model_id, None)
            new = list(zip(words, vectors, strict=True))
        matrix = self._matrix.get(model_id)
        size = len(rows)
        if matrix is None or matrix.shape[1] != vectors.shape[1] or not rows:
            matrix = np.zeros((max(1024, len(new)), vectors.shape[1]), dtype=np.float32)
        if size + len(new) > len(matrix):
            grown = np.zeros((max(2 * len(matrix), size + len(new)), matrix.shape[1]),
                             dtype=np.float32)  # fmt: skip
            grown[:size] = matrix[:size]
            matrix = grown
        for offset, (word, vector) in enumerate(new):
            matrix[size + offset] = vector
            rows[word] = size + offset
        self._matrix[model_id] = matrix


#: The process's word vectors.
WORDS = WordVectors()


def coverages(
    terms: npt.NDArray[np.float32],
    words: npt.NDArray[np.float32],
    flat: npt.NDArray[np.intp],
    sizes: Sequence[int],
) -> npt.NDArray[np.float64]:
    """Each chunk's soft coverage: for every row of ``terms`` (the question's words) its
    highest cosine with the chunk's word rows of ``words``, averaged over the question's
    words; 0 for a chunk without words. Chunk ``i``'s rows are the next ``sizes[i]``
    entries of ``flat``."""
    counts = np.asarray(sizes, dtype=np.intp)
    out = np.zeros(len(counts), dtype=np.float64)
    filled = counts > 0
    if not filled.any() or not len(terms):
        return out
    # one row per word, one column per question word: a matrix-vector product per question
    # word (a few), ~20x cheaper than one matrix product on a loaded 2-core machine
    sims = np.stack([words @ term for term in terms], axis=1)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))[filled]
    out[filled] = np.maximum.reduceat(sims[flat], starts, axis=0).mean(axis=1)
    return out


def batch_embedder(embed_query: Callable[[str], object]) -> tuple[str, EmbedBatch] | None:
    """The model id and batch embedder behind a bound ``embed_query``: the engine's
    ``CachedEmbedder``'s ``embed`` reading the store's embedding cache (the words made at
    ingest, so a reopened store does not embed them again) without writing the words it
    embeds (a question's few new words: a write per question is not worth keeping them),
    or the raw embedder's when it is not cached; None when it offers no batch ``embed`` or
    no model id."""
    owner = getattr(embed_query, "__self__", None)
    embed = getattr(owner, "embed", None)
    model_id = getattr(owner, "model_id", None)
    if not callable(embed) or not isinstance(model_id, str):
        return None
    if isinstance(owner, CachedEmbedder):
        return model_id, functools.partial(owner.embed, keep=False)
    return model_id, embed


def word_source(
    embed_query: Callable[[str], object], setting: float | None = SOFT_TERMS_DEFAULT
) -> tuple[tuple[str, EmbedBatch] | None, float]:
    """Where the words' vectors come from and the rule's weight, for ``setting``
    (``GateOptions.soft_terms``): the model's word table (``embed.word_table``) when it
    has one, else, only for a set weight, the model itself (:func:`batch_embedder`); the
    weight :data:`SOFT_TERMS_WEIGHT` for None with a table, the setting otherwise (None
    without a table: 0, off)."""
    model_id = getattr(getattr(embed_query, "__self__", None), "model_id", None)
    table = table_words(model_id) if isinstance(model_id, str) else None
    if table is not None:
        return table, SOFT_TERMS_WEIGHT if setting is None else setting
    if setting is None or setting <= 0.0:
        return None, 0.0
    return batch_embedder(embed_query), setting


def words_of_texts(texts: Iterable[str]) -> list[str]:
    """The distinct content words of ``texts`` (:func:`chunk_words`), in order."""
    return list(dict.fromkeys(chain.from_iterable(map(chunk_words, texts))))


def with_soft_terms(
    pool: Sequence[Candidate],
    message: str,
    embedder: tuple[str, EmbedBatch] | None,
    weight: float = SOFT_TERMS_WEIGHT,
    words_of: WordVectors = WORDS,
) -> list[Candidate]:
    """``pool`` with its conversation chunks ordered by relevance plus ``weight`` × their
    soft coverage above the pool's median (see the module) and given the chunks'
    relevances again in that order, best first; ``pool`` as it was (a new list) when
    ``weight`` is 0, there is no ``embedder``, fewer than two conversation chunks, or no
    content word in ``message``."""
    if weight <= 0.0 or embedder is None:
        return list(pool)
    at = [i for i, c in enumerate(pool) if c.memory.provenance.turn_ids]
    asked = question_words(message) if len(at) >= 2 else ()
    if not asked:
        return list(pool)
    model_id, embed = embedder
    chunks = [pool[i] for i in at]
    found = words_of.rows_of(model_id, asked, [c.memory.content for c in chunks], embed)
    if found is not None:
        table, asked_rows, per_chunk = found
        # each distinct word's vector read once: the chunks share most of their words
        rows, flat = np.unique(np.concatenate(per_chunk), return_inverse=True)
        cover = coverages(table[asked_rows], table[rows], flat, [len(r) for r in per_chunk])
    else:  # the table started afresh under us: this call's words on their own
        held = [chunk_words(c.memory.content) for c in chunks]
        vocabulary = list(dict.fromkeys(chain(asked, *held)))
        local = {w: i for i, w in enumerate(vocabulary)}
        flat = np.fromiter(map(local.__getitem__, chain.from_iterable(held)), dtype=np.intp)
        matrix = words_of.matrix(model_id, vocabulary, embed)
        cover = coverages(matrix[: len(asked)], matrix, flat, [len(h) for h in held])
    lift = np.maximum(cover - float(np.median(cover)), 0.0)
    scores = [c.relevance + weight * float(lift[i]) for i, c in enumerate(chunks)]
    return reordered(pool, at, scores)
