"""What a block holds that no message asks for: three rules that leave such lines out of the
automatic selection (relevance gating, step 4; issue 12, session 26). Each is a field of
:class:`Trim` (``GateOptions.trim``; :data:`DEFAULT_TRIM` turns on the first two, chosen by
leaving one project out over the gating evaluation's ten tune halves for their tokens with
no must-include label lost; :data:`NO_TRIM` is the selection before them);
:func:`~engrain.recall.select.select_gated` applies them only with thresholds (the
automatic budget of the ``gated`` profile), never to an explicit budget.

* **A pin judged by its threshold** (``pin_threshold``). A pinned memory at least
  ``select.PIN_MIN_RELEVANCE`` relevant leads the block; without this rule it also passes
  whatever its score, with it a pin leads only when it clears its kind's test as any
  memory must (its intent's threshold; a preference its relevance floor). A pin is the
  user's word that a memory matters whenever it is relevant: it buys the memory its place
  in the block, not a relevance it lacks (the issue: pins "count as relevant only when
  they are"). On the gating evaluation's ten tune halves 40 pinned lines led under their
  tests (3,758 tokens, 8.5 a message) and none was labelled needed.
* **No background for a question** (``question_background`` False). The invariants
  unrelated to the message (``select.unrelated_invariant``) keep a small place in every
  block because they prevent mistakes in the work done; a question that asks for no
  procedure (``Intent.QUESTION`` without the classifier's how-to signals, which
  ``recall.area`` gives the golden paths of their area) asks what is so, and an invariant
  about another part of the project changes nothing in the answer — the reason a
  preference needs more relevance outside a request for work
  (``select.ANSWER_PROCEDURAL_MIN_RELEVANCE``). On the ten tune halves such questions
  carried 85 unrelated invariant lines (4,640 tokens), none labelled needed.
* **A line the block already says** (``restated``: a cosine, ``None`` off). A typed
  learning whose embedding is at least this similar to a line already selected restates
  it (``Settings.conflict_similarity``'s 0.8: MiniLM puts restatements of one fact at
  0.80-0.87, different facts about one thing under 0.7) and is left out; conflict partners
  join their memory as before (the model must see both versions of a disagreement).

Pure functions of one call's candidates: nothing is shared, cached or written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from engrain.errors import ValidationError
from engrain.model import MemoryFields
from engrain.recall.area import HOW_TO_SIGNALS
from engrain.recall.classify import Classification, Intent


@dataclass(frozen=True)
class Trim:
    """Which of the rules apply (all off by default: the selection as before).
    ``background``: resolved per message by :meth:`for_message` (whether this message's
    block keeps its unrelated invariants)."""

    pin_threshold: bool = False
    question_background: bool = True
    restated: float | None = None
    background: bool = True

    def __post_init__(self) -> None:
        if self.restated is not None and not 0.0 < self.restated <= 1.0:
            raise ValidationError(f"restated must be within (0, 1], not {self.restated}")

    def for_message(self, classification: Classification) -> Trim:
        """These rules for one message: ``background`` False for a question asking for no
        procedure when ``question_background`` is off."""
        keep = self.question_background or not bare_question(classification)
        return self if keep == self.background else replace(self, background=keep)


#: Every rule off: the selection as it was before them.
NO_TRIM = Trim()
#: The rules adopted (session 26, h5): a pin judged by its threshold, no background for a
#: question asking for no procedure. The restatement rule stays off: at the conflict level
#: (0.8) it saved 1.2 tokens a message on the tune halves and lost a labelled restatement
#: (quill), and the sets' declared restatements sit at cosines 0.39-0.83, among related
#: lines that are not restatements.
DEFAULT_TRIM = Trim(pin_threshold=True, question_background=False)


def bare_question(classification: Classification) -> bool:
    """Whether the message is a question that asks for no procedure: intent question,
    without the how-to signals (``area.HOW_TO_SIGNALS``)."""
    return classification.intent is Intent.QUESTION and not HOW_TO_SIGNALS.intersection(
        classification.signals
    )


def restates(memory: MemoryFields, selected: Iterable[MemoryFields], level: float) -> str | None:
    """The id of the first of ``selected`` (typed learnings with an embedding) whose
    embedding is at least ``level`` similar to ``memory``'s, or ``None`` (also when
    ``memory`` is a conversation chunk or has no embedding)."""
    vector = memory.embedding
    if vector is None or memory.provenance.turn_ids:
        return None
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        return None
    for other in selected:
        theirs = other.embedding
        if theirs is None or other.provenance.turn_ids:
            continue
        scale = norm * float(np.linalg.norm(theirs))
        if scale > 0.0 and float(np.dot(vector, theirs)) / scale >= level:
            return other.id
    return None
