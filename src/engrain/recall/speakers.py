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

The same fact saves tokens (:func:`with_speaker_lines`, ``GateOptions.speaker_lines``): for
such a question, each ranked conversation chunk after the :data:`WHOLE_FIRST` best is
shown, for this call only, as the named speakers' lines (a copy of the memory whose
provenance names only those turns: ``recall.excerpt``), so a budget holds more of their
turns; a chunk with no line of theirs is shown whole. A line of theirs at most
:data:`SHORT_ANSWER` words long keeps the other speaker's question it answers ("Yes, twice."
says nothing without "Have you been to Paris?"); a longer line says what it is about
itself, and its question would only spend the budget's tokens (session 15). The best
chunks stay whole because they were ranked on what they say, whoever said it (where a
question names the wrong speaker, the answer is the other one's line in a top chunk).

Concurrency: pure functions of their arguments, but for a per-process cache of each memory
object's cut (a dict whose entries are replaced whole; two threads cutting the same object
store equal copies).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from functools import lru_cache

from engrain.model import MemoryFields
from engrain.recall.excerpt import chunk_lines, excerpt
from engrain.recall.relevance import Candidate
from engrain.recall.rescored import rescored
from engrain.recall.select import Ranked

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
    shares = {c.id: speaker_shares(c.memory.content) for c in pool if c.memory.provenance.turn_ids}
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
        out.append(rescored(c, c.relevance * ((1.0 - weight) + weight * share)))
    out.sort(key=lambda c: c.relevance, reverse=True)
    return out


#: Whether a question naming some (not all) of a conversation's speakers is shown, of each
#: conversation chunk past the first :data:`WHOLE_FIRST`, only their lines (see the module).
SPEAKER_LINES = True
#: The best-ranked conversation chunks shown whole all the same: they were ranked on what
#: they say, so their other speaker's lines are likely the answer (tuned on LoCoMo half A
#: among 0 / 3 / 5 / 10).
WHOLE_FIRST = 3
#: The longest line of an asked speaker (in words) shown with the question before it: a
#: short answer needs its question to be read, a longer one stands alone (LoCoMo half A,
#: multi-hop within 2,000 tokens: every question kept 0.746, none 0.762, up to 8 words
#: 0.762, up to 15 words 0.763; ``docs/decisions.md``, session 15).
SHORT_ANSWER = 8


def asked_speakers(memories: Sequence[MemoryFields], message: str) -> frozenset[str]:
    """The speakers (lower case) of ``memories``' conversation chunks that ``message``
    names; empty when it names none or all of them (then who is asked about says nothing)."""
    speakers = {
        name for m in memories if m.provenance.turn_ids for name, _ in speaker_shares(m.content)
    }
    asked = frozenset(s for s in speakers if named(message, s))
    return asked if asked != speakers else frozenset()


def line_speaker(line: str) -> str | None:
    """The speaker (lower case) of a ``Speaker: text`` line, else ``None``."""
    match = _LINE.match(line)
    return match.group(1).strip().lower() if match else None


def speaker_lines(
    lines: Sequence[str], asked: frozenset[str], short_answer: int = SHORT_ANSWER
) -> list[int]:
    """Indexes of the lines to show for a question about ``asked``: their own lines, each
    of at most ``short_answer`` words with the question it answers (the line before ends
    with ``?``); every line when none is theirs (such a chunk was ranked on what the others
    said, and is shown as it is)."""
    own = [i for i, line in enumerate(lines) if line_speaker(line) in asked]
    if not own:
        return list(range(len(lines)))
    keep = set(own)
    for i in own:
        if i > 0 and lines[i - 1].rstrip().endswith("?") and _words(lines[i]) <= short_answer:
            keep.add(i - 1)
    return sorted(keep)


def _words(line: str) -> int:
    """The words of a ``Speaker: text`` line's text."""
    match = _LINE.match(line)
    return len((match.group(2) if match else line).split())


def with_speaker_lines(
    ranked: Sequence[Ranked],
    message: str,
    on: bool = SPEAKER_LINES,
    whole_first: int = WHOLE_FIRST,
    short_answer: int = SHORT_ANSWER,
) -> list[Ranked]:
    """``ranked`` with each conversation chunk after the ``whole_first`` best-ranked ones
    replaced, for this call, by the excerpt of the lines :func:`speaker_lines` keeps with
    ``short_answer`` (:func:`~engrain.recall.excerpt.excerpt`: its provenance names only
    those turns),
    when ``message`` names some of the speakers (:func:`asked_speakers`); unchanged when
    ``on`` is false or it names none or all of them."""
    if not on:
        return list(ranked)
    asked = asked_speakers([r.memory for r in ranked], message)
    if not asked:
        return list(ranked)
    out = list(ranked)
    seen = 0
    for n, r in enumerate(ranked):
        if not r.memory.provenance.turn_ids:
            continue
        cut = _cut(r.memory, asked, short_answer)
        if cut is None:  # not a chunk of one line per turn
            continue
        seen += 1
        if seen > whole_first and cut is not r.memory:
            out[n] = r._replace(memory=cut)
    return out


#: Each memory object's cut per asked speakers and answer length: copying a memory is most
#: of the cost (~15 µs), and the stores hand out the same object until the memory changes.
#: A weak reference checks that the object is the one remembered (an ``id`` can be reused).
_CUTS: dict[
    tuple[int, frozenset[str], int], tuple[weakref.ref[MemoryFields], MemoryFields | None]
] = {}
_CUTS_MAX = 20_000


def _cut(memory: MemoryFields, asked: frozenset[str], short_answer: int) -> MemoryFields | None:
    """``memory`` as the lines :func:`speaker_lines` keeps for ``asked`` and
    ``short_answer`` (itself when it keeps them all), ``None`` when it is not a chunk of one
    line per turn (:func:`~engrain.recall.excerpt.chunk_lines`); remembered per memory
    object."""
    key = (id(memory), asked, short_answer)
    hit = _CUTS.get(key)
    if hit is not None and hit[0]() is memory:
        return hit[1]
    lines = chunk_lines(memory)
    cut: MemoryFields | None = None
    if lines is not None:
        keep = speaker_lines(lines, asked, short_answer)
        cut = excerpt(memory, keep) if len(keep) < len(lines) else memory
    if len(_CUTS) >= _CUTS_MAX:
        _CUTS.clear()
    _CUTS[key] = (weakref.ref(memory), cut)
    return cut
