"""Re-ranking of conversation chunks by learning-free features (issue 15).

The pool's relevance of a conversation chunk is a hand-set blend (``recall.relevance``:
cosine and BM25, then scaled by who and when the question asks about). Here the chunks of
one query are ordered again by a linear score of features computed from the question and
the pool alone (no model at query time beyond MiniLM's cosine already in the pool).

**Shipped: the session's best chunk.** ``relevance + 0.5 × session``, where ``session`` is
the highest relevance among the *other* chunks of the chunk's session in the pool. A
conversation's session is about a few things, and a question's evidence sits in a few
turns of a session, often split over neighbouring chunks ("I adopted a dog" … "Max loves
the park"); a chunk whose session holds the best match is likelier evidence than an
equally scored chunk alone in its session. The weight 0.5 was tuned on LoCoMo's half A
among 0 / 0.1 / 0.2 / 0.3 / 0.5 / 0.7 / 1.0 (``bench/train_chunk_rank.py tune``); half B
(never tuned on) is the out-of-sample number (``docs/decisions.md``).

The other features, measured and not shipped (a listwise fit of all of them on half A did
worse on half B than the rule alone; each one added to the pool's relevance moved R@10 by
at most ±0.01): ``dense_rank`` / ``lexical_rank`` (the chunk's rank among the query's
chunks by cosine and by BM25, ``1 - rank / n``); ``dense_peak`` / ``lexical_peak`` (those
ranks times how peaked the list is: the best score's lead over the fifth best, relative to
the best — a per-query calibration of the dense/lexical blend); ``coverage`` (the share of
the question's terms, IDF-weighted over the pool's chunks, the chunk holds) and
``line_coverage`` (the same in its best line: term proximity at a turn's granularity);
``entities`` (the share of the question's proper nouns other than the speakers the chunk
names); ``speaker`` (the share of the chunk written by the speakers the question names);
``length`` (``log(1 + words) / log(300)``).

The weights live in ``chunk_rank.json`` beside this module, written by
``bench/train_chunk_rank.py``. The score only *orders*: the chunks keep the pool's
relevance values, handed out again in the new order (the best-scored chunk gets the highest
relevance any chunk had, and so on), so every threshold, the automatic budget and every
other memory's place mean what they meant. A pool without conversation chunks (typed
learnings) is returned unchanged.

**The pool's depth.** The session rule reads the pool, so what it can lift depends on how
deep the pool was gathered: a budget's pool is ``max(50, budget / 40)`` nearest and lexical
matches, 50 under 2,000 tokens, which holds the best session's best chunk but seldom the
chunks of that session the rule would lift. A pool led by a conversation chunk is gathered
again :data:`CHUNK_POOL` (125, a 5,000-token budget's) deep when its budget's is shallower
(:func:`deep_enough`, ``recall.gate``), so a transcript question's ranking no longer depends on
the budget asked for. Depths 50 / 75 / 100 / 125 / 200 on LoCoMo's half A at 2,000 tokens:
0.897 / 0.913 / 0.916 / 0.918 / 0.918 (with the session rule off, 50 → 125 gives 0.886 →
0.894: the depth pays mostly through the rule). A pool led by a typed learning keeps its
budget's depth (nothing read twice).

Concurrency: pure functions of their arguments; the weights are read once per process
(``functools.cache``) from a file shipped with the package, and a chunk's terms are cached
per content string (``functools.lru_cache``, thread-safe).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engrain.errors import ConfigError
from engrain.recall.relevance import Candidate
from engrain.recall.rescored import reordered
from engrain.recall.speakers import named, speaker_shares
from engrain.store.lexical import tokenize

#: Whether conversation chunks are re-ranked by default (``GateOptions.chunk_rank``).
CHUNK_RANK = True
#: How many nearest and lexical matches the pool of a question led by a conversation chunk
#: takes, whatever the budget (``GateOptions.chunk_pool``; 0: the budget's depth alone): the
#: pool of a 5,000-token budget (:func:`deep_enough`).
CHUNK_POOL = 125
WEIGHTS_FILE = Path(__file__).with_name("chunk_rank.json")

FEATURES = (
    "relevance", "dense_rank", "lexical_rank", "dense_peak", "lexical_peak", "coverage",
    "line_coverage", "entities", "speaker", "length", "session",
)  # fmt: skip

#: The list position whose score a peak is measured against (the best's lead over it).
PEAK_AT = 5

_NAME = re.compile(r"\b[A-Z][a-z][A-Za-z'-]*")


@dataclass(frozen=True)
class Weights:
    """A linear score's coefficients by feature name, and its intercept."""

    coefficients: Mapping[str, float]
    intercept: float = 0.0

    def vector(self) -> npt.NDArray[np.float64]:
        """The coefficients in :data:`FEATURES` order (a missing one is 0)."""
        return np.array([self.coefficients.get(n, 0.0) for n in FEATURES], dtype=np.float64)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"coefficients": dict(self.coefficients), "intercept": self.intercept}


@cache
def shipped_weights() -> Weights:
    """The weights stored in ``chunk_rank.json``."""
    try:
        data = json.loads(WEIGHTS_FILE.read_text(encoding="utf-8"))
        coefficients = {str(k): float(v) for k, v in data["coefficients"].items()}
        unknown = set(coefficients) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown features {sorted(unknown)}")
        return Weights(coefficients, float(data.get("intercept", 0.0)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot read the chunk ranking weights {WEIGHTS_FILE}: {exc}") from exc


def _ranks(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``1 - rank / n`` of each value (best 1.0); ties share the better rank; zeros 0."""
    n = len(values)
    order = np.argsort(-values, kind="stable")
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.arange(n, dtype=np.float64)
    sorted_values = values[order]
    for i in range(1, n):  # ties: the better rank
        if sorted_values[i] == sorted_values[i - 1]:
            ranks[order[i]] = ranks[order[i - 1]]
    out = 1.0 - ranks / n
    out[values <= 0.0] = 0.0
    return out


def _peak(values: npt.NDArray[np.float64]) -> float:
    """How far the best value leads the :data:`PEAK_AT`-th, relative to the best, in [0, 1]."""
    if len(values) == 0:
        return 0.0
    ordered = np.sort(values)[::-1]
    best = float(ordered[0])
    if best <= 0.0:
        return 0.0
    other = float(ordered[min(PEAK_AT, len(ordered)) - 1])
    return max(0.0, min(1.0, (best - max(0.0, other)) / best))


def proper_names(message: str, speakers: frozenset[str]) -> frozenset[str]:
    """The terms of the capitalised words of ``message`` after its first word (names of
    people, places, titles), the conversation's ``speakers`` left out."""
    found = set()
    for match in _NAME.finditer(message):
        if match.start() == 0:
            continue
        found.update(tokenize(match.group(0)))
    spoken = {t for s in speakers for t in tokenize(s)}
    return frozenset(found - spoken)


@lru_cache(maxsize=65_536)
def _terms(content: str) -> tuple[frozenset[str], tuple[frozenset[str], ...]]:
    """The lexical terms of ``content`` and of each of its lines."""
    lines = tuple(frozenset(tokenize(line)) for line in content.splitlines())
    return frozenset().union(*lines), lines


#: The features read from the pool's numbers alone (no text is read for them).
POOL_FEATURES = frozenset({"relevance", "session"})


def features(
    chunks: Sequence[Candidate], message: str, only: frozenset[str] | None = None
) -> npt.NDArray[np.float64]:
    """The :data:`FEATURES` of each conversation chunk of one query's pool, a row each;
    with ``only`` a subset of :data:`POOL_FEATURES`, the other columns are left 0 and no
    text is read (what the shipped rule needs)."""
    n = len(chunks)
    rows = np.zeros((n, len(FEATURES)), dtype=np.float64)
    rows[:, 0] = [c.relevance for c in chunks]
    rows[:, 10] = session_support(chunks)
    if only is not None and only <= POOL_FEATURES:
        return rows
    cosines = np.array([c.similarity for c in chunks], dtype=np.float64)
    lexicals = np.array([c.lexical for c in chunks], dtype=np.float64)
    dense_rank, lexical_rank = _ranks(cosines), _ranks(lexicals)
    terms = list(dict.fromkeys(tokenize(message)))
    parsed = [_terms(c.memory.content) for c in chunks]
    bags = [bag for bag, _ in parsed]
    idf = {t: math.log(1.0 + n / (1.0 + sum(t in bag for bag in bags))) for t in terms}
    total = sum(idf.values())
    shares = [speaker_shares(c.memory.content) for c in chunks]
    speakers = frozenset(name for found in shares for name, _ in found)
    asked = frozenset(s for s in speakers if named(message, s))
    if asked == speakers:
        asked = frozenset()
    names = proper_names(message, speakers)
    rows[:, 1], rows[:, 2] = dense_rank, lexical_rank
    rows[:, 3], rows[:, 4] = dense_rank * _peak(cosines), lexical_rank * _peak(lexicals)
    for i, c in enumerate(chunks):
        bag = bags[i]
        if total > 0:
            rows[i, 5] = sum(idf[t] for t in terms if t in bag) / total
            rows[i, 6] = max(
                (sum(idf[t] for t in terms if t in line) / total for line in parsed[i][1]),
                default=0.0,
            )
        if names:
            rows[i, 7] = len(names & bag) / len(names)
        if asked:
            rows[i, 8] = sum(part for name, part in shares[i] if name in asked)
        rows[i, 9] = math.log1p(len(c.memory.content.split())) / math.log(300.0)
    return rows


def session_support(chunks: Sequence[Candidate]) -> list[float]:
    """Each chunk's best-relevance neighbour: the highest relevance among the *other*
    chunks of its session in the pool (0 alone in its session or without a session)."""
    best: dict[str, list[float]] = {}
    for c in chunks:
        if c.memory.session_id:
            top = best.setdefault(c.memory.session_id, [0.0, 0.0])
            if c.relevance > top[0]:
                top[0], top[1] = c.relevance, top[0]
            elif c.relevance > top[1]:
                top[1] = c.relevance
    out = []
    for c in chunks:
        pair = best.get(c.memory.session_id or "")
        out.append(0.0 if pair is None else (pair[1] if c.relevance >= pair[0] else pair[0]))
    return out


def transcript_led(pool: Sequence[Candidate]) -> bool:
    """Whether the most relevant candidate of ``pool`` is a conversation chunk."""
    return bool(pool) and bool(max(pool, key=lambda c: c.relevance).memory.provenance.turn_ids)


def deep_enough(pool: Sequence[Candidate], size: int, depth: int = CHUNK_POOL) -> bool:
    """Whether ``pool``, gathered ``size`` deep, holds what ranking its conversation chunks
    reads: true unless it is led by a conversation chunk (:func:`transcript_led`) and
    ``size`` is under ``depth``; then the caller gathers it again ``depth`` deep.

    The session rule lifts a chunk by the best other chunk of its session *in the pool*:
    a shallow pool (a small budget's, 50 deep) holds the best session's best chunk but not
    the chunks it would lift, which matched the question too weakly to be among the 50
    nearest or lexical matches on their own ("When did Maria meet Jean?": the evidence turn,
    ranked 7th in a 125-deep pool, is not in the 50-deep one). Gathered as deep whatever
    the budget, a transcript question's ranking no longer depends on the budget asked for:
    a 2,000-token block is the start of the 5,000-token one."""
    return size >= depth or not transcript_led(pool)


def with_chunk_rank(
    pool: Sequence[Candidate], message: str, weights: Weights | None = None
) -> list[Candidate]:
    """``pool`` with its conversation chunks ordered by the linear score of their
    :func:`features` (``weights``, default the shipped ones) and given the chunks'
    relevances again in that order (see the module), best relevance first; ``pool``
    unchanged when it holds fewer than two conversation chunks."""
    at = [i for i, c in enumerate(pool) if c.memory.provenance.turn_ids]
    if len(at) < 2:
        return list(pool)
    chunks = [pool[i] for i in at]
    chosen = weights if weights is not None else shipped_weights()
    used = frozenset(name for name, value in chosen.coefficients.items() if value)
    scores = features(chunks, message, used) @ chosen.vector()
    return reordered(pool, at, scores.tolist())
