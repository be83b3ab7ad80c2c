"""Step 4, importance (spec 1.5): ``0.6 × novelty + 0.4 × salience``; below 0.3, discarded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engrain.ingest import signals
from engrain.model import Vector

NOVELTY_WEIGHT = 0.6
SALIENCE_WEIGHT = 0.4
DISCARD_BELOW = 0.3

#: Salience signals and their weights (spec 1.5); the sum is capped at 1.0.
SALIENCE_NAMED_ENTITY = 0.3
SALIENCE_NUMBER_OR_DATE = 0.2
SALIENCE_PREFERENCE = 0.4
SALIENCE_TECHNICAL_TERM = 0.1


def novelty(vector: Vector, centroid: Vector | None) -> float:
    """Cosine distance from the centroid of the user's memories, clamped to [0, 1];
    1.0 when the user has no memories yet."""
    if centroid is None:
        return 1.0
    norm = float(np.linalg.norm(centroid)) * float(np.linalg.norm(vector))
    if norm == 0.0:
        return 1.0
    distance = 1.0 - float(np.dot(vector, centroid)) / norm
    return min(1.0, max(0.0, distance))


def salience(text: str, speakers: Sequence[str] = ()) -> tuple[float, list[str]]:
    """The heuristic salience of ``text`` and the names of the signals that fired.

    ``speakers`` are the people a conversation chunk's turns are labelled with ("Caroline:
    …"): they are persons named in the text, so they count as named entities even where the
    capitalisation rule cannot tell a name at the start of a line from a sentence start."""
    fired: list[str] = []
    score = 0.0
    named = bool(speakers) or signals.has_named_entity(text)
    for name, weight, test in (
        ("named_entity", SALIENCE_NAMED_ENTITY, lambda _: named),
        ("number_or_date", SALIENCE_NUMBER_OR_DATE, signals.has_number_or_date),
        ("preference", SALIENCE_PREFERENCE, signals.has_preference),
        ("technical_term", SALIENCE_TECHNICAL_TERM, signals.has_technical_term),
    ):
        if test(text):
            fired.append(name)
            score += weight
    return min(1.0, score), fired


def importance(novelty_score: float, salience_score: float) -> float:
    """``0.6 × novelty + 0.4 × salience``."""
    return NOVELTY_WEIGHT * novelty_score + SALIENCE_WEIGHT * salience_score
