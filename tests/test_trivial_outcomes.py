"""Trivial by the rules, or not (issue 12, session 21): a call asked alone is a presence
check; the user's next step with when it happens, a question answered by the asker where it
was found, a point taken ("that explains it") and an outcome told in the past that went well
ask nothing; a success negated ("build didn't pass", "nothing went through") is a failure
report. Examples written for these tests; the shapes came from the tune halves
(``short-messages.jsonl``, ``trivial-*.jsonl``)."""

from __future__ import annotations

import pytest

from engrain.recall.classify import Complexity, classify
from engrain.recall.open_work import negates
from engrain.recall.trivial import NO_CONTENT_SIGNAL, PHRASE_SIGNAL, trivial_signal


@pytest.mark.parametrize(
    ("message", "signal"),
    [("hello?", NO_CONTENT_SIGNAL), ("hey??", NO_CONTENT_SIGNAL),  # a call: anyone there?
     ("yo, anyone?", NO_CONTENT_SIGNAL),
     ("will test it tonight", PHRASE_SIGNAL), ("gonna try that after lunch", PHRASE_SIGNAL),
     ("ok, will check after the standup", PHRASE_SIGNAL), ("checking...", PHRASE_SIGNAL),
     ("found it", PHRASE_SIGNAL), ("nvm found it in the docs", PHRASE_SIGNAL),
     ("oh that explains a lot", PHRASE_SIGNAL), ("ahh this explains it", PHRASE_SIGNAL),
     ("the backfill went fine", PHRASE_SIGNAL), ("db migration went through 👍", PHRASE_SIGNAL),
     ("it ran smoothly, thanks", PHRASE_SIGNAL), ("worked like a charm, ty", PHRASE_SIGNAL),
     ("great idea", PHRASE_SIGNAL), ("classic windows 😂", PHRASE_SIGNAL),  # one word more
     ("that's the one", PHRASE_SIGNAL), ("sounds good, thanks", PHRASE_SIGNAL)],
)  # fmt: skip
def test_these_short_replies_ask_nothing(message: str, signal: str) -> None:
    assert trivial_signal(message) == signal
    assert classify(message).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "message",
    ["ok?", "so?",  # acknowledgements asked are not a call
     "hello? the build is failing",
     "try it after the migration",  # a request, not the user's next step
     "found a bug", "found it, but it's empty",
     "that explains the 500s but not the timeouts",
     "the backfill went fine?", "the deploy went through but staging is down",
     "it runs fine locally",  # present tense: often half a report
     "v2 deploy went fine",  # a number in the subject
     "build didn't pass", "ci wasn't green", "tests won't pass", "deploy didnt pass",
     "nothing passed", "none passing", "nothing went through",  # success negated
     "lol what", "haha why", "lol still",  # the word more after a laugh keeps work open
     "sounds good, go",  # praise then a request: nothing praised, "go" asks
     "yes, that one", "right, that one"],  # a pick after an answer
)  # fmt: skip
def test_these_short_replies_stay_messages(message: str) -> None:
    assert trivial_signal(message) is None
    assert classify(message).complexity is not Complexity.TRIVIAL


@pytest.mark.parametrize(
    ("word", "negation"),
    [("no", True), ("nothing", True), ("didn't", True), ("didnt", True), ("won't", True),
     ("wasnt", True), ("cannot", True), ("went", False), ("want", False), ("print", False),
     ("don", False), ("know", False)],
)  # fmt: skip
def test_a_negation_is_a_word_of_the_closed_class_or_contracted(word: str, negation: bool) -> None:
    assert negates(word) is negation
