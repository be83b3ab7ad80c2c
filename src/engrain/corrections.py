"""Corrections and conflicts between memories.

- A **correction** ("Actually, my timezone is Europe/Bratislava, not America/New_York")
  supersedes the memory it corrects: the old one is kept, linked (``superseded_by``) and
  never injected again; the correction records what it corrects. Without an explicit
  target, the nearest active memory at least ``correction_similarity`` close is it.
- Two active memories that are about the same thing (cosine at least
  ``conflict_similarity``) but **disagree** are flagged for review: each lists the other
  in ``provenance.metadata["conflicts_with"]``. They are then injected together, each with
  its date and a review note, so the model sees both and can ask. Disagreeing means: they
  state different numbers, one negates what the other says, or they name different
  things (capitalised names, acronyms) where the rest is the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from engrain.model import Kind, Memory, Provenance

CONFLICTS_WITH = "conflicts_with"
CORRECTS = "corrects"
#: Kinds whose statements can contradict one another (events and summaries just happened).
CONFLICT_KINDS = frozenset(
    {Kind.FACT, Kind.PREFERENCE, Kind.DECISION, Kind.INVARIANT, Kind.PATTERN, Kind.CONTEXT}
)

_NEGATION = re.compile(
    r"\b(?:not|never|no longer|don'?t|doesn'?t|isn'?t|aren'?t|won'?t|can'?t|cannot|"
    r"didn'?t|stopped|quit)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_WORD = re.compile(r"[A-Za-z][\w'/.-]*")


def _names(text: str) -> set[str]:
    """Capitalised words that do not open the text, and acronyms."""
    words = _WORD.findall(text)
    return {
        w for i, w in enumerate(words) if (i > 0 and w[0].isupper()) or (w.isupper() and len(w) > 1)
    }


def disagreement(a: str, b: str) -> str | None:
    """Why two texts about the same thing disagree, or ``None`` if they do not appear to."""
    na, nb = set(_NUMBER.findall(a)), set(_NUMBER.findall(b))
    if na and nb and na != nb:
        return "different numbers"
    if bool(_NEGATION.search(a)) != bool(_NEGATION.search(b)):
        return "one negates the other"
    names_a, names_b = _names(a), _names(b)
    words_a = {w.lower() for w in _WORD.findall(a)}
    words_b = {w.lower() for w in _WORD.findall(b)}
    differing = words_a ^ words_b
    if (names_a - names_b) and (names_b - names_a) and len(differing) <= 6:
        return "different names"
    return None


def conflicts_of(memory: Memory) -> tuple[str, ...]:
    """The ids this memory is flagged as conflicting with."""
    return tuple(memory.provenance.metadata.get(CONFLICTS_WITH) or ())


def with_meta(memory: Memory, **changes: Any) -> Memory:
    """The memory with provenance metadata keys set (``None`` removes a key)."""
    meta = {k: v for k, v in {**memory.provenance.metadata, **changes}.items() if v is not None}
    return memory.evolve(provenance=Provenance(memory.provenance.turn_ids, meta))


def flag(memory: Memory, others: Iterable[str]) -> Memory:
    """The memory flagged as conflicting with ``others`` too."""
    ids = list(dict.fromkeys([*conflicts_of(memory), *others]))
    return with_meta(memory, **{CONFLICTS_WITH: ids})


def unflag(memory: Memory, others: Iterable[str]) -> Memory:
    """The memory no longer flagged against ``others`` (a resolved or deleted partner)."""
    gone = set(others)
    ids = [i for i in conflicts_of(memory) if i not in gone]
    return with_meta(memory, **{CONFLICTS_WITH: ids or None})
