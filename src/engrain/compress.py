"""Session compression (spec section 3): old episodic sessions become one semantic summary.

Triggered when a user has more than ``compression_threshold`` uncompressed episodic
sessions: the oldest ``sessions_to_compress`` (default threshold / 2) are summarised, each
into a semantic memory with ``source_session_id`` and ``compression_source=True``, and
their episodic memories are marked ``compressed`` — never deleted, left out of recall
unless ``include_compressed=True``.

With an LLM the spec's prompt writes the summary. Without one (or when it fails), the
extractive summariser keeps the session's own sentences that carry its names, numbers,
dates and technical terms, chosen greedily to cover as many of them as possible within a
word limit, in the order they were said.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from engrain.errors import LLMError
from engrain.ingest.chunk import split_sentences
from engrain.ingest.signals import has_technical_term
from engrain.model import Kind, Memory, MemoryType, Provenance, Vector
from engrain.recall.classify import domains_of
from engrain.store import MemoryFilter, Store
from engrain.store.base import Patch

log = logging.getLogger(__name__)

#: The spec's summarisation prompt (3.2), word for word.
SUMMARY_PROMPT = """Summarize the following conversation into 2-3 sentences capturing key facts,
decisions, and topics discussed. Be specific and preserve names, numbers, and
technical details. Do not include pleasantries.
Conversation:
{session_content}"""

#: The extractive summary's limits: enough for a session's facts, far below its length.
SUMMARY_MAX_WORDS = 120
SUMMARY_MAX_SENTENCES = 6

_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*\b")
_SPEAKER = re.compile(r"^([A-Z][\w .'-]{0,40}):\s")
_WORD = re.compile(r"[A-Za-z][\w'/.-]*[\w]|[A-Za-z]")
_NUMBER = re.compile(r"[$€£]?\d[\d,.:/-]*\d%?|[$€£]?\d%?")
_MONTH_OR_DAY = re.compile(
    r"\b(?:january|february|march|april|may|june|july|august|september|october|november"
    r"|december|monday|tuesday|wednesday|thursday|friday|saturday|sunday|yesterday"
    r"|tomorrow|tonight|last\s+(?:week|month|year)|next\s+(?:week|month|year))\b",
    re.IGNORECASE,
)
_PLEASANTRY = re.compile(
    r"^(?:hey|hi|hello|thanks|thank you|bye|goodbye|good (?:night|morning)|see you|talk soon"
    r"|congrat\w*|wow|aw+|haha)\b",
    re.IGNORECASE,
)
_COMMON_CAPS = frozenset(
    ("I", "The", "A", "An", "And", "But", "So", "Then", "This", "That", "It", "We", "You",
     "He", "She", "They", "My", "Our", "Your", "His", "Her", "Their", "Yes", "No", "Oh",
     "Hey", "Hi", "Hello", "Thanks", "Thank", "Wow", "Well", "Okay", "OK", "Sure", "Great",
     "Nice", "Cool", "Also", "Just")
)  # fmt: skip


@dataclass(frozen=True)
class CompressionReport:
    """What one compression did: the sessions summarised, the summary memory of each, how
    many episodic memories were marked compressed, and who wrote each summary."""

    sessions: tuple[str, ...] = ()
    summaries: tuple[str, ...] = ()
    compressed: int = 0
    summarized_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class Session:
    """One session's uncompressed episodic memories, in the order they happened."""

    session_id: str
    memories: tuple[Memory, ...]

    @property
    def started(self) -> datetime:
        """When the session's first memory was created (the spec's sort key)."""
        return min(m.created_at for m in self.memories)

    @property
    def when(self) -> datetime:
        """When the session happened (its earliest event time, else creation)."""
        return min(m.when for m in self.memories)


def sessions(memories: Sequence[Memory]) -> list[Session]:
    """The uncompressed episodic memories grouped by session id (memories without one are
    never compressed), oldest session first: by creation, then event time, then id."""
    groups: dict[str, list[Memory]] = {}
    for m in memories:
        if m.memory_type is MemoryType.EPISODIC and not m.compressed and m.session_id:
            groups.setdefault(m.session_id, []).append(m)
    found = [
        Session(sid, tuple(sorted(ms, key=lambda m: (m.when, m.created_at, m.id))))
        for sid, ms in groups.items()
    ]
    return sorted(found, key=lambda s: (s.started, s.when, s.session_id))


def due(
    memories: Sequence[Memory], threshold: int, count: int | None = None, *, force: bool = False
) -> list[Session]:
    """The sessions to compress now: none unless there are more than ``threshold`` (or
    ``force``), then the oldest ``count`` (default ``threshold // 2``, at least one)."""
    found = sessions(memories)
    if not force and len(found) <= threshold:
        return []
    return found[: max(1, count if count is not None else threshold // 2)]


def key_terms(sentence: str) -> set[str]:
    """What a summary must not lose from ``sentence``: names (capitalised words that do not
    start it, and the speaker), numbers and dates, technical terms. A short greeting has
    none, whoever it names."""
    terms: set[str] = set()
    speaker = _SPEAKER.match(sentence)
    body = sentence
    if speaker:
        body = sentence[speaker.end() :]
    if _PLEASANTRY.match(body.strip()) and len(body.split()) <= 4:
        return terms  # "Hey Mel!", "Thanks, Caroline!": a greeting names no fact
    if speaker:
        terms.add(speaker.group(1).strip())
    for match in _NAME.finditer(body):
        if match.start() == 0 or match.group(0) in _COMMON_CAPS:
            continue
        terms.add(match.group(0))
    terms.update(m.group(0) for m in _NUMBER.finditer(body))
    terms.update(m.group(0).lower() for m in _MONTH_OR_DAY.finditer(body))
    terms.update(w for w in _WORD.findall(body) if len(w) > 3 and has_technical_term(w))
    return terms


def extractive_summary(
    texts: Sequence[str],
    *,
    max_words: int = SUMMARY_MAX_WORDS,
    max_sentences: int = SUMMARY_MAX_SENTENCES,
) -> str:
    """The session's sentences that together cover the most names, numbers, dates and
    technical terms, picked greedily (most new terms first, then the shorter) within the
    limits and printed in the order they were said. Sentences that add no term
    (pleasantries) are never picked. Empty if nothing carries a term."""
    sentences: list[str] = []
    for text in texts:
        for line in text.splitlines():
            speaker = _SPEAKER.match(line)
            body = line[speaker.end() :] if speaker else line
            prefix = speaker.group(0) if speaker else ""
            sentences.extend(prefix + s for s in split_sentences(body))
    terms = [key_terms(s) for s in sentences]
    covered: set[str] = set()
    chosen: list[int] = []
    words = 0
    while len(chosen) < max_sentences:
        best, gain = -1, 0
        for i, found in enumerate(terms):
            if i in chosen:
                continue
            new = len(found - covered)
            size = len(sentences[i].split())
            if new > gain and words + size <= max_words:
                best, gain = i, new
            elif new == gain and new and best >= 0 and size < len(sentences[best].split()):
                best = i
        if best < 0:
            break
        chosen.append(best)
        covered |= terms[best]
        words += len(sentences[best].split())
    return _join([sentences[i] for i in sorted(chosen)])


def _join(sentences: Sequence[str]) -> str:
    """Sentences in order; a speaker's name is written once for consecutive sentences."""
    out: list[str] = []
    last = None
    for sentence in sentences:
        speaker = _SPEAKER.match(sentence)
        name = speaker.group(1) if speaker else None
        if name is not None and name == last:
            sentence = sentence[speaker.end() :] if speaker else sentence
        last = name if name is not None else last
        out.append(sentence)
    return " ".join(out)


def summarize(session: Session, complete: Callable[[str], str] | None = None) -> tuple[str, str]:
    """The summary of ``session`` and what wrote it (``"llm"`` or ``"extractive"``). An LLM
    failure or an empty reply falls back to the extractive summary with a warning."""
    texts = [m.content for m in session.memories]
    if complete is not None:
        prompt = SUMMARY_PROMPT.format(session_content="\n".join(texts))
        try:
            reply = " ".join(complete(prompt).split())
        except LLMError as exc:
            log.warning("session %s: LLM summary failed (%s); extractive summary instead",
                        session.session_id, exc)  # fmt: skip
        else:
            if reply:
                return reply, "llm"
            log.warning("session %s: empty LLM summary; extractive summary instead",
                        session.session_id)  # fmt: skip
    text = extractive_summary(texts)
    if not text:  # nothing but pleasantries: keep the opening lines rather than nothing
        text = " ".join(" ".join(texts).split()[:SUMMARY_MAX_WORDS])
    return text, "extractive"


@dataclass(frozen=True)
class Compression:
    """What one compression writes: the summary memories (new) and the patches marking
    their sessions' episodic memories compressed, with the report to return."""

    summaries: tuple[Memory, ...] = ()
    patches: tuple[Patch, ...] = ()
    report: CompressionReport = CompressionReport()


def compress(
    store: Store,
    embed: Callable[[Sequence[str]], Vector],
    complete: Callable[[str], str] | None,
    user_id: str,
    *,
    threshold: int,
    count: int | None,
    force: bool,
    now: datetime,
) -> Compression:
    """Plan the compression of the user's due sessions (nothing when none is due): each
    summarised (the LLM's ``complete`` when given, else extractive) and embedded, the
    summary built from the session's memories as they are after that (slow) work, so a
    memory forgotten meanwhile does not reach it, and a session another compression (a
    thread's, another process's) marked compressed meanwhile is left to that one."""
    flt = MemoryFilter(memory_types=(MemoryType.EPISODIC,), include_compressed=False)
    sessions_due = due(store.query(user_id, flt), threshold, count, force=force)
    if not sessions_due:
        return Compression()
    written = [summarize(session, complete) for session in sessions_due]
    vectors = embed([text for text, _ in written])
    summaries: list[Memory] = []
    patches: list[Patch] = []
    for session, (text, by), vector in zip(sessions_due, written, vectors, strict=True):
        current = store.get(user_id, [m.id for m in session.memories])
        if not current or any(m.compressed for m in current):
            continue
        summaries.append(summary_memory(session, current, text, by, vector, now))
        patches += [Patch(user_id, m.id, {"compressed": True}) for m in current if not m.compressed]
    report = CompressionReport(
        tuple(s.source_session_id or "" for s in summaries), tuple(m.id for m in summaries),
        len(patches), tuple(m.provenance.metadata["summarized_by"] for m in summaries),
    )  # fmt: skip
    return Compression(tuple(summaries), tuple(patches), report)


def summary_memory(
    session: Session, current: Sequence[Memory], text: str, by: str, vector: Vector, now: datetime
) -> Memory:
    """The semantic summary memory of ``session`` (its memories as they are now:
    ``current``), written by ``by``: it keeps their turn ids and ids as provenance, their
    project if they share one, their domains (else the text's), and the highest importance
    among them. Its id is :func:`summary_id`, so two compressions of the same session at
    once write one summary, not two."""
    projects = {m.project for m in current}
    turn_ids = tuple(dict.fromkeys(t for m in current for t in m.provenance.turn_ids))
    return Memory.new(
        current[0].user_id, text, MemoryType.SEMANTIC, Kind.SUMMARY, now=now, embedding=vector,
        event_at=session.when, project=projects.pop() if len(projects) == 1 else None,
        domains=tuple(dict.fromkeys(d for m in current for d in m.domains)) or domains_of(text),
        source_session_id=session.session_id,
        compression_source=True, importance=max(m.importance for m in current),
        confidence=Kind.SUMMARY.default_confidence,
        provenance=Provenance(turn_ids, {"summarized_by": by,
                                         "compressed_from": [m.id for m in current]}),
    ).evolve(id=summary_id(session.session_id, current))  # fmt: skip


def summary_id(session_id: str, current: Sequence[Memory]) -> str:
    """The id of the summary of ``session_id``'s memories ``current``: a function of the
    user, the session and those memories' ids (32 hex characters, like any id). Two
    compressions racing on one session (threads, or processes on one store: each plans
    from what it read, and neither's write can see the other's plan) then write the same
    row, the later replacing the earlier, instead of two summaries of one session; a
    session that later gets new memories has other ids, so its next summary is another."""
    key = "\x1f".join([current[0].user_id, session_id, *sorted(m.id for m in current)])
    return hashlib.blake2b(key.encode("utf-8"), digest_size=16).hexdigest()
