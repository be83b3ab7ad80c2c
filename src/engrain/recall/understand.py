"""Classify → budget, and the turn before: the first stage of the gate.

:func:`understand` takes the :class:`~engrain.recall.stages.Call` and gives an
:class:`~engrain.recall.stages.Understood`: the message classified (refined by the intent
model where it applies), its budget and weights, and the reads that need no query vector
begun beside the model's embedding (:func:`~engrain.recall.pool_reads.start_reads`).
:func:`follow_up` takes that and gives it with what a follow-up is searched with
(``recall.previous``). Per-call state only: the values returned.
"""

from __future__ import annotations

from dataclasses import replace

from engrain.recall.budget import Budget, assign_budget
from engrain.recall.classify import Classification, Complexity, classify
from engrain.recall.intent_model import applies, embedder_of, refine
from engrain.recall.pool_reads import start_reads
from engrain.recall.previous import joined_text, joined_vector, reading
from engrain.recall.score import gated_weights
from engrain.recall.stages import Call, Understood


def understand(call: Call, turn: int) -> Understood:
    """The message classified (refined by the intent model where it applies) and its budget
    and weights. The reads that need no vector start first (on a store that overlaps them)
    with the rules' budget; the model rarely changes the pool's size, and then they start
    again (:func:`~engrain.recall.pool._candidates`)."""
    options, clock, message = call.options, call.clock, call.message
    classification = classify(message, turn=turn, vocabulary=options.vocabulary)
    clock.lap("classify")
    vector, embedder, started = None, embedder_of(call.embed_query), None
    if classification.complexity is not Complexity.TRIVIAL and applies(embedder):
        rules_budget = _budget(call, classification)
        if rules_budget.tokens > 0:
            started = start_reads(call, message, rules_budget)
        vector = call.embed_query(message)  # the pool's query vector: a second opinion on intent
        clock.lap("embed")
        classification = refine(classification, message, vector, embedder)
        clock.lap("intent model")
    budget = _budget(call, classification)
    weights = gated_weights(classification)
    clock.lap("budget")
    return Understood(classification, budget, weights, vector, message, vector, started)


def _budget(call: Call, classification: Classification) -> Budget:
    """The explicit budget, else the classification's, capped at ``max_budget``."""
    if call.token_budget is not None:
        return Budget(call.token_budget, (f"explicit: {call.token_budget}",))
    budget = assign_budget(
        classification, depth=call.options.depth, prioritize_speed=call.options.prioritize_speed
    )
    if call.max_budget is not None and budget.tokens > call.max_budget:
        return Budget(call.max_budget, (*budget.steps, f"capped at {call.max_budget} (tier)"))
    return budget


def follow_up(call: Call, understood: Understood) -> Understood:
    """With the turn before (``previous``): a message that leans on it searched with both
    turns, their words and their query vectors blended (``recall.previous``), its lexical
    matches begun again for them; and the classification's signal saying whether the turn
    before was used, and why. Without it: ``understood`` as it is."""
    if call.previous is None:
        return understood
    classification, vector = understood.classification, understood.vector
    started = understood.started
    read = reading(call.message, classification)
    searched, search_vector = understood.searched, understood.search_vector
    if read.used and call.options.previous_weight > 0:
        vector = call.embed_query(call.message) if vector is None else vector
        searched = joined_text(call.message, call.previous)
        search_vector = joined_vector(
            vector, call.embed_query(call.previous), call.options.previous_weight
        )
        if started is not None:  # the lexical matches begun for the message alone
            again = start_reads(call, searched, understood.budget, pinned=False)
            started = again._replace(pinned=started.pinned)
        call.clock.lap("previous turn")
    classification = replace(classification, signals=(*classification.signals, read.note()))
    return understood._replace(classification=classification, vector=vector, searched=searched,
                               search_vector=search_vector, started=started)  # fmt: skip
