"""The pool's rules, in order: each takes the call and the pool and returns the pool.

:data:`POOL_RULES` is the order (summaries, speakers, time, soft terms, chunk rank, line
vectors, asked turns, second round, candidate domains, work, area, language, sentences,
pointed); each rule is one call into the module that owns it, and what the rules mark
(:class:`~engrain.recall.stages.Marks`) becomes the classification's signals in one place
(:func:`signalled`). An immutable tuple of functions; no state between calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from engrain.recall.area import with_area
from engrain.recall.asked_turns import with_asked_turns
from engrain.recall.chunk_rank import with_chunk_rank
from engrain.recall.classify import DOMAIN_KEYWORDS, Classification, Vocabulary, domains_of
from engrain.recall.excerpt import store_line_vectors
from engrain.recall.language import with_language
from engrain.recall.pointed import with_pointed
from engrain.recall.relevance import Candidate
from engrain.recall.second_round import with_second_round
from engrain.recall.sentences import best_pieces, sentence_index
from engrain.recall.soft_terms import with_soft_terms, word_source
from engrain.recall.speakers import with_speakers
from engrain.recall.stages import Call, Marks, Pool
from engrain.recall.summaries import with_summaries
from engrain.recall.when import with_time
from engrain.recall.work import with_work


def _summaries(call: Call, pool: Pool) -> Pool:
    """Session summaries join the pool (``recall.summaries``)."""
    o = call.options
    found = with_summaries(pool.candidates, call.store, call.embed_query, call.user_id,
                           pool.searched, pool.search_vector, call.flt, o.session_summaries,
                           o.lexical_weight * o.hybrid)  # fmt: skip
    return pool._replace(candidates=found)


def _speakers(call: Call, pool: Pool) -> Pool:
    """Who is asked about (``recall.speakers``)."""
    found = with_speakers(pool.candidates, call.message, call.options.speaker_weight)
    return pool._replace(candidates=found)


def _time(call: Call, pool: Pool) -> Pool:
    """When it is asked about (``recall.when``)."""
    found = with_time(pool.candidates, call.message, call.now, call.options.time_weight)
    return pool._replace(candidates=found)


def _soft_terms(call: Call, pool: Pool) -> Pool:
    """Chunks by words near the question's (``recall.soft_terms``)."""
    words = word_source(call.embed_query, call.options.soft_terms)
    return pool._replace(candidates=with_soft_terms(pool.candidates, call.message, *words))


def _chunk_rank(call: Call, pool: Pool) -> Pool:
    """Conversation chunks re-ranked by their features (``recall.chunk_rank``)."""
    if not call.options.chunk_rank:
        return pool
    return pool._replace(candidates=with_chunk_rank(pool.candidates, call.message))


def _line_vectors(call: Call, pool: Pool) -> Pool:
    """The line vectors of the user's conversation chunks (``recall.excerpt``), for the
    asked speaker's turns and the excerpts."""
    return pool._replace(line_vectors=store_line_vectors(call.store, call.user_id,
                                                         call.embed_query))  # fmt: skip


def _asked_turns(call: Call, pool: Pool) -> Pool:
    """The tail by the asked speaker's turns (``recall.asked_turns``)."""
    found = with_asked_turns(pool.candidates, call.message, call.options.asked_turns,
                             call.embed_query, pool.line_vectors)  # fmt: skip
    return pool._replace(candidates=found)


def _second_round(call: Call, pool: Pool) -> Pool:
    """Chunks ranked again by the best's (``recall.second_round``)."""
    found = with_second_round(pool.candidates, call.message, call.options.second_round)
    return pool._replace(candidates=found)


def _candidate_domains(call: Call, pool: Pool) -> Pool:
    """The candidates' own domain names the message uses (:func:`with_candidate_domains`)."""
    classification = with_candidate_domains(
        pool.classification, call.message, pool.candidates, call.options.vocabulary
    )
    return pool._replace(classification=classification)


def _work(call: Call, pool: Pool) -> Pool:
    """Preferences for the kind of work asked raised (``recall.work``)."""
    if not call.options.work:
        return pool
    found, works, other_work = with_work(pool.candidates, call.message, pool.classification)
    marks = pool.marks._replace(works=works, other_work=other_work)
    return pool._replace(candidates=found, marks=marks)


def _area(call: Call, pool: Pool) -> Pool:
    """The conventions of the message's area raised (``recall.area``)."""
    marks = pool.marks
    found, area, raised = with_area(pool.candidates, pool.classification,
                                    unconcerned=marks.other_work)  # fmt: skip
    return pool._replace(candidates=found, marks=marks._replace(area=area, raised=raised))


def _language(call: Call, pool: Pool) -> Pool:
    """Preferences about a code request's language raised (``recall.language``)."""
    if not call.options.language:
        return pool
    marks = pool.marks
    found, languages, spoken = with_language(pool.candidates, call.message,
                                             pool.classification, marks.other_work)  # fmt: skip
    marks = marks._replace(languages=languages, spoken=spoken)
    return pool._replace(candidates=found, marks=marks)


def _sentences(call: Call, pool: Pool) -> Pool:
    """Each split learning's best sentence's cosine marked for ``explain()``
    (``recall.sentences``; the similarities were raised in
    :func:`~engrain.recall.pool._by_sentences`)."""
    o = call.options
    index = sentence_index(call.store, call.user_id, call.embed_query, o.sentence_weight)
    if not call.explain or index is None:
        return pool
    vector = pool.search_vector
    if vector is None:  # the pool's vector, as _candidates computed it (no intent model)
        vector = call.embed_query(pool.searched)
    found = best_pieces(index, vector, [c.memory for c in pool.candidates])
    return pool._replace(marks=pool.marks._replace(sentences=found))


def _pointed(call: Call, pool: Pool) -> Pool:
    """The memories a clear match points to raised (``recall.pointed``)."""
    found, pointed = with_pointed(pool.candidates, call.message)
    return pool._replace(candidates=found, marks=pool.marks._replace(pointed=pointed))


#: The pool's rules, in the order they apply (each a function of the call and the pool).
POOL_RULES: tuple[Callable[[Call, Pool], Pool], ...] = (
    _summaries, _speakers, _time, _soft_terms, _chunk_rank, _line_vectors, _asked_turns,
    _second_round, _candidate_domains, _work, _area, _language, _sentences, _pointed,
)  # fmt: skip


def signalled(classification: Classification, marks: Marks) -> Classification:
    """``classification`` with the signals of what the pool's rules marked: the work asked,
    the area, the languages of a request for code, the memories pointed to."""
    signals = []
    if marks.works:
        asked = ", ".join(sorted({w.value for kinds in marks.works.values() for w in kinds}))
        signals.append(f"work: {asked}")
    if marks.area:
        signals.append(f"area: {', '.join(marks.area)}")
    if marks.spoken:
        signals.append(f"language: {', '.join(sorted(marks.languages))}")
    if marks.pointed:
        links = ", ".join(f"{mid} by {by}" for mid, (by, _) in marks.pointed.items())
        signals.append(f"pointed to: {links}")
    if not signals:
        return classification
    return replace(classification, signals=(*classification.signals, *signals))


def with_candidate_domains(
    classification: Classification,
    message: str,
    pool: Sequence[Candidate],
    vocabulary: Vocabulary | None = None,
) -> Classification:
    """``classification`` with the candidates' own domain names that ``message`` uses
    added to its domains (signal ``candidate domains: …``).

    A message is tagged with the built-in domains and the configured vocabulary only, yet
    memories carry the user's domains ("payments", "experiments"): a domain name the user
    gave a memory is a word that tags a message saying it ("the payments webhook", "rerun
    the experiment"), so without any configuration the domain term can match. Matching is
    :func:`~engrain.recall.classify.domains_of`'s for a user domain without keywords (the
    name, singular or plural, simple inflections; "data-quality" also as "data quality").
    """
    known = {*classification.domains, *DOMAIN_KEYWORDS, *(vocabulary or ())}
    named = sorted({d for c in pool for d in c.memory.domains} - known)
    if not named:
        return classification
    spelled = {d: [spaced] if (spaced := _SEPARATORS.sub(" ", d)) != d else [] for d in named}
    found = [d for d in domains_of(message, spelled) if d in spelled]
    if not found:
        return classification
    return replace(
        classification,
        domains=(*classification.domains, *found),
        signals=(*classification.signals, f"candidate domains: {', '.join(found)}"),
    )


_SEPARATORS = re.compile(r"[-_/]+")
