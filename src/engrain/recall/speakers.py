"""Who is asked about: a question naming a speaker wants that speaker's turns.

Most questions about a conversation name a person ("What did Caroline research?"), and the
evidence is nearly always that person's own turns (on LoCoMo's development split, 97% of
the evidence turns of a question naming one of the two speakers are that speaker's). A
conversation chunk holds a few consecutive turns, often of both speakers; its relevance
is scaled by the share of its text the named speakers wrote:

    relevance × ((1 - w) + w × share)

with ``w`` = :data:`SPEAKER_WEIGHT`. A chunk written by the named speaker keeps its
relevance; one where they only said "Cool!" loses up to ``w`` of it. Nothing changes for
a question that names no speaker of the candidates (or names all of them), nor for a
memory that is not a conversation chunk (no turn ids, no ``Speaker:`` lines).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

from engrain.recall.relevance import Candidate

#: The share of a chunk's relevance that depends on who wrote it (tuned on LoCoMo half A).
SPEAKER_WEIGHT = 0.3

_LINE = re.compile(r"^([^:\n]{1,40}): (.*)$", re.MULTILINE)
_WORD = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=65_536)
def speaker_shares(content: str) -> tuple[tuple[str, float], ...]:
    """Each speaker of a ``Speaker: text`` chunk (lower case) with the share of the chunk's
    turn text they wrote; empty when ``content`` has no such lines."""
    sizes: dict[str, int] = {}
    for match in _LINE.finditer(content):
        name = match.group(1).strip().lower()
        sizes[name] = sizes.get(name, 0) + len(match.group(2))
    total = sum(sizes.values())
    if not total:
        return ()
    return tuple((name, size / total) for name, size in sizes.items())


def named(message: str, speaker: str) -> bool:
    """Whether ``message`` names ``speaker`` (lower case): the whole name or its first
    word, as a word ("Caroline's" names "caroline")."""
    words = set(_WORD.findall(message.lower()))
    parts = _WORD.findall(speaker)
    return bool(parts) and (parts[0] in words or " ".join(parts) in message.lower())


def with_speakers(
    pool: Sequence[Candidate], message: str, weight: float = SPEAKER_WEIGHT
) -> list[Candidate]:
    """``pool`` with each conversation chunk's relevance scaled by the share of it the
    speakers ``message`` names wrote (see the module), best relevance first; ``pool``
    unchanged when ``weight`` is 0 or the message names none (or all) of its speakers."""
    if weight <= 0.0:
        return list(pool)
    shares = {
        c.id: speaker_shares(c.memory.content) for c in pool if c.memory.provenance.turn_ids
    }
    speakers = {name for found in shares.values() for name, _ in found}
    asked = {s for s in speakers if named(message, s)}
    if not asked or asked == speakers:
        return list(pool)
    out = []
    for c in pool:
        found = shares.get(c.id)
        if not found:
            out.append(c)
            continue
        share = sum(part for name, part in found if name in asked)
        out.append(replace(c, relevance=c.relevance * ((1.0 - weight) + weight * share)))
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out
