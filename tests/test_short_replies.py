"""Short replies, trivial or not (issue 12, session 20): examples from the tune half of
``bench/gating/short-messages.jsonl``. A reply that asks for work on the turn before (a bare
"?", a question of acknowledgements, function words alone, a verb with its object, a word
pointing back) is never trivial, neither by the rules nor by a model; a reassurance, a time of
day, an apology for something, a sign-off formula and a short reply the intent model reads as
a greeting, with a social word in it, are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engrain.embed.minilm import MODEL_ID
from engrain.recall import acknowledgement as ack
from engrain.recall import intent_model as im
from engrain.recall.classify import Complexity, classify
from engrain.recall.contentless import follows_up
from engrain.recall.trivial import (
    NO_CONTENT_SIGNAL,
    PHRASE_SIGNAL,
    asks_for_work,
    says_something_social,
    trivial_signal,
)

SHORT_MESSAGES = Path(__file__).resolve().parent.parent / "bench/gating/short-messages.jsonl"


@pytest.mark.parametrize(
    ("message", "signal"),
    [("you're right, my mistake", NO_CONTENT_SIGNAL),  # "mistake": an apology word
     ("don't worry about it", NO_CONTENT_SIGNAL),  # a negation before an apology word
     ("not a problem", NO_CONTENT_SIGNAL),
     ("that's all for today, thanks", NO_CONTENT_SIGNAL),  # a time of day
     ("anyone home?", NO_CONTENT_SIGNAL),  # a presence check
     ("you there?", NO_CONTENT_SIGNAL),
     ("apologies for the delay", PHRASE_SIGNAL),  # an apology for something
     ("have a good one", PHRASE_SIGNAL),  # a sign-off formula
     ("let me try", PHRASE_SIGNAL),  # the user's next step, its object left out
     ("will try that", PHRASE_SIGNAL), ("on it", PHRASE_SIGNAL),
     ("copy that", PHRASE_SIGNAL),  # the radio acknowledgement, not a verb with its object
     ("give me a minute", PHRASE_SIGNAL), ("wait a sec", PHRASE_SIGNAL),  # a moment asked
     ("that's a great idea, thanks", PHRASE_SIGNAL),  # praise: what is praised
     ("great explanation, really appreciate it", PHRASE_SIGNAL), ("nice catch", PHRASE_SIGNAL),
     ("redis restart fixed it, cheers", PHRASE_SIGNAL),  # success, a compound subject
     ("funktioniert, danke!", PHRASE_SIGNAL), ("ya funciona, gracias", PHRASE_SIGNAL),
     ("tack så mycket", PHRASE_SIGNAL),  # thanks and "works" in the languages listed
     ("lol same", PHRASE_SIGNAL),  # a reaction: "same" with a social word
     ("dag's green again 🚀", PHRASE_SIGNAL),  # success: "again" with a word of success
     ("👍", PHRASE_SIGNAL)],
)  # fmt: skip
def test_rules_read_these_short_replies_as_trivial(message: str, signal: str) -> None:
    assert trivial_signal(message) == signal
    assert classify(message).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "message",
    ["??", "?",  # a bare question mark asks for the answer again
     "so?", "ok?", "all good?",  # a question of acknowledgements asks
     "again", "that one",  # function words alone
     "lol ok, run it", "you fix it",  # a verb with its object, no first-person subject
     "ok bet, now do prod",  # "do" and what to do it to
     "same thing", "this one too", "next", "shorter", "try again",  # pointing back
     "great, now the same for prod",  # praise, then a request
     "redis restart not fixed",  # a compound subject, a negation
     "staging redis restart fixed",  # three words before it: more than a subject
     "thanks, still 500s on staging"],
)  # fmt: skip
def test_rules_keep_these_short_replies_messages(message: str) -> None:
    assert trivial_signal(message) is None
    assert classify(message).complexity is not Complexity.TRIVIAL


@pytest.mark.parametrize(
    ("words", "asks"),
    [(["run", "it"], True), (["i", "get", "it"], False), (["we", "fixed", "that"], False),
     (["trying", "it"], False), (["love", "it"], False), (["do", "prod"], True),
     (["yep", "that", "was", "it"], False), (["is", "it"], False),  # an auxiliary: no object
     (["will", "do", "prod"], False),
     (["same", "thing"], True), (["lol", "same"], False), (["too"], True),
     (["you", "too"], True), (["nice", "that's", "way", "cleaner"], False)],
)  # fmt: skip
def test_follows_up_is_a_verb_with_its_object_or_a_word_pointing_back(
    words: list[str], asks: bool
) -> None:
    social = {"lol", "nice", "love", "yep"}.__contains__
    assert follows_up(words, social) is asks


def test_the_acknowledgement_model_is_not_asked_about_a_follow_up() -> None:
    for message in ("same thing", "try again", "shorter", "next", "this one too"):
        assert asks_for_work(message)
        assert not ack.eligible(classify(message), message)
    assert ack.eligible(classify("tip top"), "tip top")


@pytest.mark.parametrize(
    ("message", "social"),
    [("ya funciona, gracias", True), ("ok i will tryed", True), ("lol i spent ages", True),
     ("go ahead", False), ("as a table", False), ("it's red again", False),
     ("prod's on fire 🔥", False), ("worse now", False), ("fixed", False)],
)  # fmt: skip
def test_a_social_word_greets_thanks_acknowledges_praises_or_laughs(
    message: str, social: bool
) -> None:
    assert says_something_social(message) is social


def test_no_not_trivial_message_of_the_tune_half_is_trivial_by_the_rules() -> None:
    rows = [json.loads(line) for line in SHORT_MESSAGES.read_text().splitlines()]
    tune = [r for r in rows if r["split"] == "tune" and r["label"] == "not"]
    assert len(tune) == 128
    assert [r["text"] for r in tune if classify(r["text"]).complexity is Complexity.TRIVIAL] == []


@pytest.mark.model
@pytest.mark.parametrize(
    "message",
    ["ok i will tryed", "lol i spent two hours on that, thank you", "ok, reading the docs now",
     "good, i try it tomorow"],
)  # fmt: skip
def test_a_short_reply_read_as_a_greeting_with_a_social_word_is_trivial(  # type: ignore[no-untyped-def]
    minilm, message: str
) -> None:
    rules = classify(message)
    assert rules.complexity is not Complexity.TRIVIAL
    read = im.refine(rules, message, minilm.embed([message])[0], MODEL_ID)
    assert read.complexity is Complexity.TRIVIAL
    assert read.signals[-1].endswith("→ greeting")


@pytest.mark.model
@pytest.mark.parametrize(
    "message",
    ["go ahead", "as a table", "retry", "worse now", "prod's on fire 🔥", "ok bet, now do prod",
     "same thing", "try again", "shorter", "next", "this one too", "😬 still failing",
     "didn't work"],
)  # fmt: skip
def test_a_request_or_a_report_stays_a_message_whatever_the_models_say(  # type: ignore[no-untyped-def]
    minilm, message: str
) -> None:
    rules = classify(message)
    read = im.refine(rules, message, minilm.embed([message])[0], MODEL_ID)
    assert read.complexity is not Complexity.TRIVIAL
