"""Short replies that keep the work open (relevance gating, step 1): never read as nothing.

In a coding assistant a two-word reply often carries the task on: "no luck" and "still red"
say the fix did not hold, "continue" asks for the rest, "wym" asks what was meant, "that
one" picks one of the options shown. Each needs the project's memory as much as the turn
before did. A model that knows the register of a reply, not its words
(:mod:`engrain.recall.acknowledgement`, and the intent model's "greeting"), reads them as
acknowledgements; this module names the words that say otherwise, each a closed class with
its reason, so that no model turns such a reply into nothing:

* a **failure reported** — a symptom or problem word the rules already know
  (:data:`~engrain.recall.cues.SYMPTOM`: "failing", "broken", "didn't work"; "error",
  "bug", "issue", "problem", "timeout": :data:`~engrain.recall.cues.PROBLEM_NAMES`, but
  "no problem"), a test run's colour of failure (:data:`FAILED_RUN`: "red"), or a part out
  of service (:data:`OUT_OF_SERVICE`: "it's down right now", "staging went offline");
* a **negation** (:data:`NEGATIONS`: "no luck", "not yet", "nothing") — something did not
  happen or is not so — unless it negates a reassurance word ("no rush", "not a problem":
  :func:`engrain.recall.contentless.reassures`);
* **persistence or a goal not reached** (:data:`PERSISTENCE`: "still", "yet", "anymore",
  "almost", "closer") — a state that outlasted the last answer, or progress short of done;
* a **request to go on** (:data:`GO_ON`: "continue", "go ahead", "keep going", "carry on",
  and "next" or "go" closing the reply: "ok, next", "ok go"; "good to go" is a verdict);
* a **question word**, also in chat's short forms (:data:`QUESTION_WORDS`: "why", "wym",
  "wdym") — a question without its question mark, thanks or not ("thanks, why is that");
  an exclamation ("how did i miss that, thanks!") pays for it with a block of memory;
* a **selection** of something shown: only demonstratives, "one", ordinals and articles,
  an answer before them ("that one", "yes, the second one", "those": :func:`selects`).

The models' reading of a reply the rules left open is what this module bounds
(:func:`engrain.recall.acknowledgement.short_reply`); of the rules that make a reply trivial
by its words, only the report of success takes its negations (:func:`negates`: "build
didn't pass" is a failure). Module-level frozensets and compiled patterns, only read: any
number of threads may use them at once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engrain.recall import cues
from engrain.recall.asides import fails_to_work
from engrain.recall.contentless import APOLOGY, reassures

#: The colour of a failed test run or build ("still red", "CI's red"): green is success.
FAILED_RUN = frozenset(["red"])
#: A part out of service, said after "is" or "went" ("it's down right now", "staging is
#: down again", "the worker went offline"): an outage, the opposite of "back up". The
#: acknowledgement model read "it's down right now" as a reply that asks nothing (p 0.90).
#: "down" names a good change too ("costs are down"), but a reply left a message costs a
#: block of memory and an outage made trivial costs the answer.
OUT_OF_SERVICE = re.compile(
    r"(?:\b(?:is|are|was|were|went|goes|going|be|been)|(?<=[a-z])'(?:s|re))\s+"
    r"(?:\w+\s+)?(?:down|offline)\b",
    re.I,
)
#: Problem words reported ("errors again", "timeout again"):
#: :data:`~engrain.recall.cues.PROBLEM_WORD` less the "fix" family, which as often reports
#: the fix ("that fixes it"); "problem" after a negation is a reassurance
#: (:func:`_reports_problem`).
_PROBLEM = re.compile(rf"\b(?:{cues.PROBLEM_NAMES})\b", re.I)
#: Negations: something did not happen or is not so ("no luck", "not yet", "nothing").
NEGATIONS = frozenset(
    ["no", "not", "nope", "nah", "never", "nothing", "none", "nowhere", "neither", "nor",
     "cannot", "without"]
)  # fmt: skip
_WORD = re.compile(r"(?:[^\W_]|')+")
#: The contracted negation, with or without its apostrophe ("didn't", "doesnt", "won't").
_NOT = re.compile(
    r"^(?:\w+n't|(?:do|does|did|is|was|are|were|has|have|had|could|would|should|wo|ca|ai)nt)$"
)
#: A state that outlasted the last answer, has not come yet, or is only partly reached.
PERSISTENCE = frozenset(
    ["still", "yet", "anymore", "almost", "nearly", "closer", "partly", "partially"]
)
#: Asking for the work to go on.
GO_ON = re.compile(
    r"\b(?:continue|proceed|resume|go (?:on|ahead)|keep (?:going|at it)|carry on|go for it)\b|"
    # the same in the other languages whose thanks the rules know ("hazlo", "vas-y")
    r"(?<![\w'])(?:hazlo|hacelo|hágalo|adelante|sigue|continúa|continua|procede|"
    r"vas-y|allez-y|fais-le|faites-le|mach (?:es|das|weiter)|weiter|los geht'?s|"
    r"fallo|procedi|vai avanti|faz isso|pode fazer|manda ver|prossiga)(?![\w'])|"
    r"(?:\bnext(?: one| step| please| pls)?|(?<!\bto )\bgo)\W*$",
    re.I,
)
#: Question words and chat's short forms of a question ("wym": what do you mean).
QUESTION_WORDS = frozenset(
    ["what", "why", "how", "which", "where", "when", "who", "whom", "whose", "wym", "wdym",
     "wut", "wat"]
)  # fmt: skip
#: Words that pick one of what was shown ("that one", "the second one", "those", "the
#: latter"): demonstratives, "one", ordinals.
SELECTORS = frozenset(
    ["this", "that", "these", "those", "one", "ones", "both", "either", "neither", "first",
     "second", "third", "fourth", "fifth", "last", "latter", "former"]
)  # fmt: skip
#: Answers that may lead a selection ("yes, that one", "ok the second one").
ANSWERS = frozenset(["yes", "yeah", "yep", "yup", "ya", "ok", "okay", "k", "sure", "right"])
#: What a selection may hold besides: articles and "of", "them" ("both of them").
_SELECTION = frozenset(["the", "a", "an", "of", "them", "all", *SELECTORS])


def keeps_work_open(text: str, words: Sequence[str]) -> bool:
    """Whether the short reply ``text`` (its lower-cased ``words``) keeps the work of the
    turn before open: a failure, a negation that is not a reassurance, persistence, a
    request to go on, a question word, or a selection of what was shown."""
    if not words:
        return False
    if cues.SYMPTOM.search(text) or _reports_problem(text, words) or GO_ON.search(text):
        return True
    if OUT_OF_SERVICE.search(text):
        return True  # "it's down right now", "staging went offline"
    said = _WORD.findall(text.lower())  # every word, as the reply wrote it
    if fails_to_work(said):
        return True  # "no funciona", "ça marche pas"
    if not (FAILED_RUN.isdisjoint(words) and PERSISTENCE.isdisjoint(words)):
        return True
    if not QUESTION_WORDS.isdisjoint(words):
        return True
    if selects(said):
        return True  # of the whole reply: "that did the trick" is no pick of "that"
    return any(negates(w) and not reassures(words[i + 1 : i + 3]) for i, w in enumerate(words))


def _reports_problem(text: str, words: Sequence[str]) -> bool:
    """Whether ``text`` (its lower-cased ``words``) names a problem (:data:`_PROBLEM`), other
    than the apology word of a reassurance: "no problem", "not a problem", "wasn't a
    problem" (a negation, then the word: :func:`~engrain.recall.contentless.reassures`)."""
    named = {match.group(0).lower() for match in _PROBLEM.finditer(text)}
    if not named:
        return False
    reassured = any(negates(w) and reassures(words[i + 1 : i + 3]) for i, w in enumerate(words))
    return not (reassured and named <= APOLOGY)


def selects(words: Sequence[str]) -> bool:
    """Whether ``words``, after a leading answer ("yes", "ok": :data:`ANSWERS`), only pick
    one of what was shown ("that one", "yes, the second one", "ok those")."""
    i = 0
    while i < len(words) and words[i] in ANSWERS:
        i += 1
    picked = words[i:]
    return bool(picked) and _SELECTION.issuperset(picked) and not SELECTORS.isdisjoint(picked)


def negates(word: str) -> bool:
    """Whether the lower-cased ``word`` is a negation (:data:`NEGATIONS`, or contracted:
    "didn't", "wasnt", "won't")."""
    return word in NEGATIONS or bool(_NOT.match(word))
