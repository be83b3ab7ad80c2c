"""The conversation's turn before the message: when it lends the message its subject.

A continuation ("and the refresh ones?", "good, now the tests for it", "what if the gateway
was offline for two weeks though") names no subject of its own: it is about what the turn
before was about. ``context(message, previous=...)`` lets that turn lend relevance, and only
where the message needs it (:func:`reading`):

* the message is classified on its own (the previous turn only says that there was a turn
  before, so a follow-up can be read as one at all);
* it leans on the previous turn when it is a continuation, or a short message that points
  back ("what's its URL?", "which box do I run it on?", "on the login node?"), and does not
  open a new topic ("unrelated, but …", "by the way, …", "never mind that, …");
* then the pool is searched with the query vector of both, the message's and the previous
  turn's unit vectors summed (the message never weighs less than the turn before: the
  previous turn cannot outvote what the message asks), and with the lexical terms of both;
  the gate's thresholds, budget and scoring stay the message's (the seed's continuation:
  its own thresholds and recency, nothing for the budget).

A self-contained message is answered exactly as without ``previous``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from engrain.model import Vector
from engrain.recall import cues
from engrain.recall.classify import Classification, Intent

#: The previous turn's unit vector's weight in a follow-up's query vector, the message's
#: being 1: equal, and never more (a larger weight would let the turn before outvote what
#: the message asks). 0 turns the lending off.
PREVIOUS_WEIGHT = 1.0
#: A continuation this short (in words) has no subject of its own; a longer one names it.
SHORT_CONTINUATION = 12
#: A message this short (in words) that points back at something is a follow-up.
SHORT_FOLLOW_UP = 8
#: A fragment this short that starts with a preposition ("on the login node?", "for
#: subscriptions too") continues the previous turn's question.
FRAGMENT = 6

#: A pronoun standing for the previous turn's subject, where a self-contained message does
#: not put one: leading ("it errors about CUDA"), after an auxiliary ("what should it
#: take", "is that enough"; not "is it worth", "would it be": those name their subject
#: after), as the object of a leading verb ("make it …"), last ("drop it?", "run it on?",
#: "… then?"), or possessive ("its URL"). A relative "that" ("a hook that returns …") is
#: none of these.
POINTS_BACK = re.compile(
    r"^(?:it|that|those|they|them)\b"
    r"|\b(?:do|does|did|is|are|was|were|will|would|can|could|should|has|have)\s+"
    r"(?:it|that|those|they)\b(?!\s+(?:be|been|worth|all|a|an|the|possible|ok|okay|true)\b)"
    r"|^(?:make|run|put|move|call|name|use|test|ship|fix|change|do|try|keep|send)\s+"
    r"(?:it|that|them|those)\b"
    r"|\b(?:it|that|them|those|there|then)\s*(?:on|in|for|from|to|with|at|too|again)?\s*"
    r"[?.!]*$"
    r"|\bits\b",
    re.IGNORECASE,
)
HUM = re.compile(r"^h+m+[\s,.]*", re.IGNORECASE)
PREPOSITION = re.compile(
    r"^(?:on|in|for|with|without|at|from|to|by|under|inside|via|over)\b", re.IGNORECASE
)
#: A message that says it opens a new subject: the previous turn is not its subject.
NEW_TOPIC = re.compile(
    r"^(?:(?:ok|okay|right|so|also|and),?\s+)?(?:unrelated|different (?:question|topic|thing)|"
    r"separate (?:question|topic|thing)|other (?:question|topic|thing)|another (?:question|"
    r"topic|thing)|new (?:question|topic)|by the way|btw|side (?:question|note)|"
    r"never ?mind(?: that| this)?|switching (?:gears|topics?)|changing (?:the )?(?:subject|topic)|"
    r"quick unrelated)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Reading:
    """How the previous turn was read for a message: ``used`` or not, and why."""

    used: bool
    reason: str

    def note(self) -> str:
        """The line ``explain()`` shows."""
        if self.used:
            return (
                f"previous turn used ({self.reason}): the pool searched with the message and "
                "the turn before (their query vectors summed, the words of both)"
            )
        return f"previous turn not used ({self.reason})"


def reading(message: str, classification: Classification) -> Reading:
    """Whether ``message`` (classified as ``classification``) leans on the turn before.
    A trivial message never gets here (it gets nothing)."""
    body = message.strip()
    if NEW_TOPIC.match(body):
        return Reading(False, "opens a new topic")
    if classification.intent is Intent.GREETING:
        return Reading(False, "a greeting")
    words = body.split()
    opened = cues.LEAD.sub("", HUM.sub("", body, count=1), count=1) or body
    continues = classification.intent is Intent.CONTINUATION or cues.CONTINUATION.match(opened)
    if continues and len(words) <= SHORT_CONTINUATION:  # "what if …" read as debugging too
        return Reading(True, "a continuation")
    if len(words) <= SHORT_FOLLOW_UP and (POINTS_BACK.search(body) or cues.ALSO_THIS.search(body)):
        return Reading(True, "a short follow-up pointing back")
    if len(words) <= FRAGMENT and PREPOSITION.match(body):
        return Reading(True, "a fragment continuing the question")
    return Reading(False, "self-contained")


def joined_vector(message: Vector, previous: Vector, weight: float = PREVIOUS_WEIGHT) -> Vector:
    """The pool's query vector: the message's unit vector plus ``weight`` (at most 1) times
    the previous turn's, as a unit vector (a zero vector leaves the other as it is)."""
    total = _unit(np.asarray(message, dtype=np.float32)) + weight * _unit(
        np.asarray(previous, dtype=np.float32)
    )
    return _unit(total)


def joined_text(message: str, previous: str) -> str:
    """The text the pool's lexical search reads: the previous turn, then the message."""
    return f"{previous}\n{message}"


def _unit(vector: Vector) -> Vector:
    norm = float(np.linalg.norm(vector))
    return (vector / norm).astype(np.float32) if norm > 0 else vector
