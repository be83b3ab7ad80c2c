"""A transcript question's meaning without the speakers' names (issue 15).

In a conversation every chunk carries its speakers' names (``Caroline: …`` on each line),
so a question naming a speaker ("What activities does Melanie partake in?") matches every
chunk of the conversation by that name equally, and the name only pulls the question's
MiniLM vector toward the chunks that *say* names (greetings: "Hey Melanie!") and away from
what is asked about (activities). Who is asked about is already a signal of its own
(``recall.speakers``: a chunk's relevance scaled by the share the named speaker wrote).

So when the pool of a question is led by conversation chunks and the question names some
of their speakers, the pool is gathered again (``recall.gate``) with a second query vector:
the question's embedding with the speakers' names removed (:func:`without_names`), and the
pool's nearest neighbours and cosines come from the mean of the two vectors
(:func:`blended`: the cosine with the normalised sum of two unit vectors orders
memories as the mean of their two cosines). The lexical matches stay those of the whole
question. A second round seeded by the first: the first pool says the question is about
a conversation and whose names are speakers.

Measured on LoCoMo's half A (``docs/decisions.md``): the weight chosen there; the mean
(0.5) and the stripped vector alone (1.0) both rank the evidence higher in every
category (dense rank of the evidence turn's chunk among a conversation's, within 50:
multi-hop 0.735 → 0.814 with the mean, single-hop 0.902 → 0.941).

Cost: one more model run (~4 ms of CPU) and one more nearest-neighbour search, only for a
question whose pool is led by a conversation chunk and names one of its speakers; a store
of typed learnings never pays it. ``GateOptions.unnamed`` 0 turns it off (ablation
``no-unnamed``).

Concurrency: pure functions of their arguments (the embedding goes through the caller's
``embed_query``, which is thread-safe).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from engrain.model import Vector
from engrain.recall.relevance import Candidate
from engrain.recall.speakers import named, speaker_shares

#: The weight of the question without the speakers' names in a transcript question's
#: search vector (``GateOptions.unnamed``; 0: off, 1: the names' vector alone replaced).
UNNAMED_WEIGHT = 0.5

_SPACES = re.compile(r"\s+")


def named_speakers(pool: Sequence[Candidate], message: str) -> tuple[str, ...]:
    """The speakers (lower case) of ``pool``'s conversation chunks that ``message`` names
    (:func:`~engrain.recall.speakers.named`), sorted; all of them when it names all."""
    speakers = {
        name
        for c in pool
        if c.memory.provenance.turn_ids
        for name, _ in speaker_shares(c.memory.content)
    }
    return tuple(sorted(s for s in speakers if named(message, s)))


def without_names(message: str, speakers: Sequence[str]) -> str | None:
    """``message`` without the words naming ``speakers`` (the whole name, then its first
    word, each with a possessive ``'s`` or ``'``), spaces collapsed; None when nothing is
    removed or no word is left."""
    out = message
    for speaker in speakers:
        parts = speaker.split()
        for name in (speaker, parts[0]) if len(parts) > 1 else (speaker,):
            out = re.sub(rf"\b{re.escape(name)}(?:'s\b|'(?!\w)|\b)", " ", out, flags=re.IGNORECASE)
    out = _SPACES.sub(" ", out).strip()
    if out == _SPACES.sub(" ", message).strip() or not re.search(r"\w", out):
        return None
    return out


def blended(vector: Vector, other: Vector, weight: float = UNNAMED_WEIGHT) -> Vector:
    """The unit vector along ``(1 - weight) × vector + weight × other``: for unit vectors,
    its cosine with any vector is ``(1 - weight) × cos₁ + weight × cos₂`` divided by a
    constant (the sum's norm), so it orders memories as that blend of cosines does."""
    total = (1.0 - weight) * np.asarray(vector, dtype=np.float32) + weight * np.asarray(
        other, dtype=np.float32
    )
    norm = float(np.linalg.norm(total))
    return vector if norm == 0.0 else (total / norm).astype(np.float32)
