"""A second round for a question about a person: the first round's best chunks as a query.

A question naming a speaker of a conversation ("What activities does Melanie partake
in?", "Which cities has John been to?") often needs several of their turns from different
sessions, each naming one instance of what is asked ("I just signed up for a pottery
class", "We went camping last week"). The question's vector sits between the category
word and the names; the best chunks of the first round are the person's own talk about
that category, so the mean of their vectors points at how *this* person speaks of it,
and ranks the pool's chunks a second time (pseudo-relevance feedback, dense only; the
seeds' rare terms as a second lexical query were not measured, session 15).

The two rankings of the pool's conversation chunks, by relevance (the first round) and by
cosine with the seeds' mean vector (the second), are fused by rank:

    1 / (k + first rank) + w / (k + second rank)

with ``k`` = :data:`FUSION_K` (reciprocal-rank fusion's usual 60), ``w`` the weight
(``GateOptions.second_round``) and :data:`SEEDS` seeds. **Off by default**
(:data:`SECOND_ROUND_WEIGHT` 0): measured at :data:`TUNED_WEIGHT` it lifted half A's
multi-hop within 2,000 tokens but cost R@10 on both halves and did not hold on half B.
As ``recall.chunk_rank`` does, the fused score only *orders*: the chunks are handed the
pool's relevance values again in the new order (:func:`~engrain.recall.rescored.reordered`),
so every threshold and the automatic budget mean what they meant. Nothing changes for a
question that names no speaker of the pool's chunks (or all of them), for a pool with no
more chunks than seeds, or for chunks without a vector (a store that does not return them).

Concurrency: a pure function of the call's pool and question (one mean of a few vectors
and one product with the pool's chunks: ~1 ms of thread CPU for 300 chunks at load ~20,
0.09 ms when no speaker is named); nothing is shared.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from engrain.recall.relevance import Candidate
from engrain.recall.rescored import reordered
from engrain.recall.speakers import asked_speakers

#: The weight measured on LoCoMo's half A with the seeds fixed at 5, among 0.2 / 0.3 / 0.5
#: (multi-hop within 2,000 tokens 0.762 without → 0.771 / 0.773 / 0.773; single-hop 0.993 /
#: 0.993 / 0.986): what ``GateOptions(second_round=TUNED_WEIGHT)`` and the LoCoMo ablation
#: ``second-round`` turn on.
TUNED_WEIGHT = 0.3
#: The second ranking's weight by default: 0, off. At :data:`TUNED_WEIGHT` it moved the
#: top ranks too: R@10 half A 0.847 → 0.840, half B (never tuned on) 0.813 → 0.801, and
#: half B's multi-hop within 2,000 0.704 → 0.693 (``docs/decisions.md``, session 15).
SECOND_ROUND_WEIGHT = 0.0
#: How many of the first round's best chunks seed the second (half A, weight 0.3:
#: 4 / 5 / 6 → 0.767 / 0.773 / 0.777; 3 and 10, weight 1, lost).
SEEDS = 5
#: Reciprocal-rank fusion's constant: how slowly a rank's share falls.
FUSION_K = 60


def with_second_round(
    pool: Sequence[Candidate],
    message: str,
    weight: float = SECOND_ROUND_WEIGHT,
    seeds: int = SEEDS,
) -> list[Candidate]:
    """``pool`` with its conversation chunks ordered by the fusion of their first ranking
    and their cosine with the mean vector of the ``seeds`` best (see the module), best
    relevance first; ``pool`` as it is when ``weight`` is 0, ``message`` names none (or
    all) of the chunks' speakers, or it holds no more than ``seeds`` chunks with vectors."""
    if weight <= 0.0 or seeds <= 0:
        return list(pool)
    at, chunks = conversation_chunks(pool)
    if len(at) <= seeds:
        return list(pool)
    if not asked_speakers([c.memory for c in chunks], message):
        return list(pool)
    vectors = np.stack([np.asarray(c.memory.embedding, dtype=np.float32) for c in chunks])
    mean = vectors[:seeds].mean(axis=0)
    norm = float(np.linalg.norm(mean))
    if norm == 0.0:
        return list(pool)
    cosines = vectors @ (mean / norm)
    second = ranks(cosines)
    scores = [
        1.0 / (FUSION_K + first) + weight / (FUSION_K + float(second[first]))
        for first in range(len(chunks))
    ]
    return reordered(pool, at, scores)


def conversation_chunks(pool: Sequence[Candidate]) -> tuple[list[int], list[Candidate]]:
    """The places in ``pool`` of its conversation chunks with vectors, in the pool's order
    (best relevance first, stable on ties), and those chunks."""
    at = [
        i for i, c in enumerate(pool)
        if c.memory.provenance.turn_ids and c.memory.embedding is not None
    ]  # fmt: skip
    at.sort(key=lambda i: -pool[i].relevance)
    return at, [pool[i] for i in at]


def ranks(values: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """Each value's place (0 for the highest) when ``values`` are sorted best first, stable
    on ties."""
    places = np.empty(len(values), dtype=np.float64)
    places[np.argsort(-values, kind="stable")] = np.arange(len(values), dtype=np.float64)
    return places
