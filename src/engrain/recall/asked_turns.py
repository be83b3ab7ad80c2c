"""A question about a person: the tail of its ranking read turn by turn (issue 15, session 16).

A list question about a person ("What activities does Melanie partake in?", "Which cities
has John been to?") is answered by several of that person's turns, each in a different
chunk of a different session ("I'm off to go swimming with the kids", "I was in Chicago").
The pool orders conversation chunks by a chunk's relevance: its one MiniLM vector (the other
speaker's reply, greetings and an image caption included), BM25, who wrote it, the time
asked about and its session's best chunk (``recall.chunk_rank``). That order is right for
the few best chunks, where a single-fact question's answer is, but in the tail, where a list
question's other instances are, the asked person's own turn is the unit the question
matches: on LoCoMo's half A, 99 multi-hop questions naming one speaker, the 40 best of that
speaker's turns by their own cosine with the question without the name hold 0.795 of the
evidence turns, the ~45 turns of theirs a 2,000-token block showed 0.764.

So, when a question names some of its pool's speakers (``recall.speakers.asked_speakers``),
the conversation chunks past the :data:`KEEP` best are ordered again by the fusion of their
rank in the pool's order (``r1``) and their rank by their *turn score* (``r2``), both
counted over all the pool's conversation chunks:

    1 / (60 + r1) + w / (60 + r2)

with ``w`` = :data:`ASKED_TURNS_WEIGHT`. A chunk's turn score is the best cosine of an
asked speaker's line with the question without the names (``recall.unnamed.without_names``):
the line vectors ``recall.turns`` derives through the embedding cache for a chunk of several
lines, the chunk's own vector for a chunk of one line; a chunk without a line of theirs
scores its own cosine times ``1 - SPEAKER_WEIGHT``, as ``recall.speakers`` scales a chunk
they did not write. Past the :data:`KEEP` best, the selected chunks are shown as the asked
speaker's lines (``recall.speakers.with_speaker_lines``), so a block fills with the turns
this order ranks.

Like ``recall.chunk_rank``, the new order only *orders*: the chunks are handed the pool's
relevance values again in the new order (``recall.rescored.reordered``), so thresholds and
the automatic budget read what they read. The :data:`KEEP` best stay where they are: they
hold a single-fact question's answer and fill the automatic budget (~700 tokens). The final
ranking (relevance with recency and importance, ``recall.score``) reaches past the pool's
10 best into its top 10, so keeping 10 still cost R@10 on half A (0.847 → 0.841, single-hop
within 2,000 0.993 → 0.990); keeping 20 costs neither (multi-hop 0.790 → 0.788).

Measured on half A (``docs/decisions.md``, session 16): the turn order alone past the 3 best
raised multi-hop within 2,000 tokens 0.762 → 0.785 but lost single-hop 0.993 → 0.961 and
temporal 0.954 → 0.933 (it ignores BM25, time and the session's support); fused, ``w`` 0.5
keeps most of both.

Cost: nothing for a question naming no speaker of its pool or a pool without conversation
chunks (a project memory never reaches the line vectors); otherwise one query embedding of
the question without the names (the engine's query cache holds it: ``recall.unnamed``
embedded the same text) and the user's line vectors, read from ``recall.turns``' snapshot
(built once per store revision in a process, its lines embedded once through the embedding
cache). ``GateOptions.asked_turns`` 0 turns it off (ablation ``no-asked-turns``).

Concurrency: pure functions of their arguments; the line vectors come from
``recall.turns``' per-process snapshots (immutable, replaced whole under a lock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from engrain.model import MemoryFields, Vector
from engrain.recall.excerpt import LineVectors, chunk_lines
from engrain.recall.relevance import Candidate
from engrain.recall.rescored import reordered
from engrain.recall.second_round import FUSION_K, conversation_chunks, ranks
from engrain.recall.speakers import SPEAKER_WEIGHT, asked_speakers, line_speaker
from engrain.recall.unnamed import without_names

#: The turn order's weight in the fusion (tuned on LoCoMo's half A among 0.5 / 1 / 2, past
#: the 3 best: multi-hop within 2,000 tokens 0.790 / 0.793 / 0.783, single-hop 0.987 / 0.982
#: / 0.979; off 0.762 / 0.993; past the 10 best at 0.5: 0.790 / 0.990). 0 turns it off.
ASKED_TURNS_WEIGHT = 0.5
#: The best-ranked conversation chunks left where they are (see the module; half A, 10 / 20:
#: R@10 0.841 / 0.847, off 0.847).
KEEP = 20


def with_asked_turns(
    pool: Sequence[Candidate],
    message: str,
    weight: float,
    embed_query: Callable[[str], Vector],
    line_vectors: LineVectors | None,
    keep: int = KEEP,
) -> list[Candidate]:
    """``pool`` with its conversation chunks past the ``keep`` best ordered by the fusion of
    their pool order and their :func:`turn_score` (see the module), best relevance first;
    ``pool`` as it is when ``weight`` is 0, it holds no more than ``keep`` conversation
    chunks with vectors, or ``message`` names none (or all) of their speakers."""
    if weight <= 0.0:
        return list(pool)
    at, chunks = conversation_chunks(pool)
    if len(at) <= keep:
        return list(pool)
    asked = asked_speakers([c.memory for c in chunks], message)
    if not asked:
        return list(pool)
    stripped = without_names(message, sorted(asked))
    if stripped is None:
        return list(pool)
    query = np.asarray(embed_query(stripped), dtype=np.float32)
    turns = np.array([turn_score(c.memory, asked, query, line_vectors) for c in chunks])
    second = ranks(turns)
    # the kept chunks score above any fused score (at most (1 + weight) / FUSION_K)
    scores = [
        float(len(chunks) - n) if n < keep
        else 1.0 / (FUSION_K + n) + weight / (FUSION_K + float(second[n]))
        for n in range(len(chunks))
    ]  # fmt: skip
    return reordered(pool, at, scores)


def turn_score(
    memory: MemoryFields,
    asked: frozenset[str],
    query: npt.NDArray[np.float32],
    line_vectors: LineVectors | None,
) -> float:
    """The best cosine of an ``asked`` speaker's line of ``memory`` with ``query`` (its own
    vector when it has one line, or when its line vectors are unknown); its own cosine times
    ``1 - SPEAKER_WEIGHT`` when none of its lines is theirs."""
    own_cosine = float(np.dot(np.asarray(memory.embedding, dtype=np.float32), query))
    lines = chunk_lines(memory)
    if lines is None:
        return own_cosine
    own = [i for i, line in enumerate(lines) if line_speaker(line) in asked]
    if not own:
        return (1.0 - SPEAKER_WEIGHT) * own_cosine
    if len(lines) == 1:
        return own_cosine
    vectors = line_vectors(memory) if line_vectors is not None else None
    if vectors is None or len(vectors) != len(lines):
        return own_cosine
    return float(np.max(vectors[own] @ query))
