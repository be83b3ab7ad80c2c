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

The words' vectors come from the raw embedder (not the store's content-hash cache: a
conversation has thousands of distinct words, and they are not memories) and are kept per
process, per model, in :class:`WordVectors` (least recently used first out, at most
:data:`MAX_WORDS` words, half precision: ~15 MB at most). The first transcript question of
a conversation embeds most of its pool's words in one batch; later ones few.

Concurrency: :class:`WordVectors` reads and writes its table under a lock and embeds
outside it (two threads missing the same word both embed it and store equal vectors); the
rest are pure functions of their arguments, a chunk's words cached per content string
(``functools.lru_cache``, thread-safe).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from engrain.recall.relevance import Candidate
from engrain.recall.rescored import rescored
from engrain.store.lexical import STOPWORDS

#: How much a chunk's soft coverage above the pool's median counts in its order (tuned on
#: LoCoMo's half A among 0.3 / 0.4 / 0.5 / 0.6; 0: off, ``GateOptions.soft_terms``).
SOFT_TERMS_WEIGHT = 0.5
#: The most word vectors a process keeps per model.
MAX_WORDS = 20_000

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


@lru_cache(maxsize=65_536)
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
    """One process's vectors of single words, per model id, least recently used out first.

    Stored in half precision (cosines of unit vectors lose < 0.001) and handed out in
    single precision."""

    def __init__(self, capacity: int = MAX_WORDS) -> None:
        self.capacity = capacity
        self._table: OrderedDict[tuple[str, str], npt.NDArray[np.float16]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._table)

    def matrix(
        self, model_id: str, words: Sequence[str], embed: EmbedBatch
    ) -> npt.NDArray[np.float32]:
        """The vectors of ``words`` (one row each, in order): the known ones from the table,
        the others embedded in one batch and kept."""
        found: dict[str, npt.NDArray[np.float16]] = {}
        with self._lock:
            for word in words:
                vector = self._table.get((model_id, word))
                if vector is not None:
                    self._table.move_to_end((model_id, word))
                    found[word] = vector
        missing = [w for w in words if w not in found]
        if missing:
            fresh = np.asarray(embed(missing), dtype=np.float16)
            with self._lock:
                for word, vector in zip(missing, fresh, strict=True):
                    found[word] = vector
                    self._table[(model_id, word)] = vector
                    self._table.move_to_end((model_id, word))
                while len(self._table) > self.capacity:
                    self._table.popitem(last=False)
        if not words:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[w] for w in words]).astype(np.float32)


#: The process's word vectors.
WORDS = WordVectors()


def coverages(
    terms: npt.NDArray[np.float32],
    words: npt.NDArray[np.float32],
    members: Sequence[Sequence[int]],
) -> npt.NDArray[np.float64]:
    """Each chunk's soft coverage: for every row of ``terms`` (the question's words) its
    highest cosine with the chunk's word rows of ``words`` (``members[i]``: chunk ``i``'s
    row indexes), averaged over the question's words; 0 for a chunk without words."""
    sims = words @ terms.T  # one row per word, one column per question word
    out = np.zeros(len(members), dtype=np.float64)
    for i, rows in enumerate(members):
        if rows:
            out[i] = float(sims[list(rows)].max(axis=0).mean())
    return out


def batch_embedder(embed_query: Callable[[str], object]) -> tuple[str, EmbedBatch] | None:
    """The model id and raw batch embedder behind a bound ``embed_query`` (the engine's
    ``CachedEmbedder.embed_query``: its inner embedder, so words stay out of the store's
    cache); None when it offers no batch ``embed`` or no model id."""
    owner = getattr(embed_query, "__self__", None)
    raw = getattr(owner, "inner", owner)
    embed = getattr(raw, "embed", None)
    model_id = getattr(raw, "model_id", None)
    if not callable(embed) or not isinstance(model_id, str):
        return None
    return model_id, embed


def with_soft_terms(
    pool: Sequence[Candidate],
    message: str,
    embedder: tuple[str, EmbedBatch] | None,
    weight: float = SOFT_TERMS_WEIGHT,
    words: WordVectors = WORDS,
) -> list[Candidate]:
    """``pool`` with its conversation chunks ordered by relevance plus ``weight`` × their
    soft coverage above the pool's median (see the module) and given the chunks'
    relevances again in that order, best first; ``pool`` as it was (a new list) when
    ``weight`` is 0, there is no ``embedder``, fewer than two conversation chunks, or no
    content word in ``message``."""
    at = [i for i, c in enumerate(pool) if c.memory.provenance.turn_ids]
    asked = question_words(message)
    if weight <= 0.0 or embedder is None or len(at) < 2 or not asked:
        return list(pool)
    model_id, embed = embedder
    chunks = [pool[i] for i in at]
    index: dict[str, int] = {w: i for i, w in enumerate(asked)}
    members: list[list[int]] = []
    for c in chunks:
        members.append([index.setdefault(w, len(index)) for w in chunk_words(c.memory.content)])
    matrix = words.matrix(model_id, list(index), embed)
    cover = coverages(matrix[: len(asked)], matrix, members)
    lift = np.maximum(cover - float(np.median(cover)), 0.0)
    scores = [c.relevance + weight * float(lift[i]) for i, c in enumerate(chunks)]
    order = sorted(range(len(chunks)), key=lambda i: (-scores[i], -chunks[i].relevance))
    values = sorted((c.relevance for c in chunks), reverse=True)
    out = list(pool)
    for value, i in zip(values, order, strict=True):
        out[at[i]] = rescored(chunks[i], value)
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out
