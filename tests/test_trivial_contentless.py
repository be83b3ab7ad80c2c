"""Short messages with no content word are trivial by reason (``recall/contentless``, issue 12,
session 19): apologies, reassurance, filler, function words and presence checks ask nothing
of memory, with or without a caller's token budget; a content word, a question word, a modal,
a negation or a number keeps a message a message."""

from __future__ import annotations

import pytest

from engrain import Engine
from engrain.recall.classify import Complexity, classify
from engrain.recall.contentless import FUNCTION_WORDS, asks_nothing
from engrain.recall.trivial import NO_CONTENT_SIGNAL, PHRASE_SIGNAL, is_trivial

from .conftest import NOW
from .test_gating import _project


@pytest.mark.parametrize(
    "message",
    ["no worries at all", "my bad, sorry", "sorry!", "oops, sorry about that", "thanks guys",
     "hmm ok", "no worries at all, thanks for that", "sorry about that 🙏",
     "hey, you around?", "still there?", "anyone around?", "are you still there?",
     "morning, anyone here?", "you online?"],
)  # fmt: skip
def test_a_message_without_a_content_word_is_trivial(message: str) -> None:
    read = classify(message)
    assert read.complexity is Complexity.TRIVIAL
    assert NO_CONTENT_SIGNAL in read.signals  # explain() says why


@pytest.mark.parametrize(
    "message",
    ["you around? the DAG is failing",  # a presence check that asks something
     "hey, you around? quick dbt question",
     "is it back?",  # about a thing, not a person
     "is it done?", "is it live",  # an auxiliary asks
     "thanks, still not working",  # a negation reports a problem
     "hi, can you help me",  # a modal asks
     "what about you?", "why?", "and for the tests?",  # a question word, a content word
     "sorry, 2 more",  # a number
     "sorry, wrong channel",
     "me too",  # function words alone say nothing either way: left to the rules
     "the other one"],
)  # fmt: skip
def test_a_content_word_a_question_word_or_a_negation_keeps_a_message(message: str) -> None:
    assert not is_trivial(message)
    assert classify(message).complexity is not Complexity.TRIVIAL


def test_function_words_alone_need_a_social_word() -> None:
    assert not asks_nothing("for all of them", ["for", "all", "of", "them"], lambda w: False)
    assert asks_nothing("sorry for all of them", ["sorry", "for", "all", "of", "them"],
                        lambda w: False)  # fmt: skip


def test_the_closed_vocabulary_holds_no_question_word_modal_auxiliary_or_negation() -> None:
    asking = {"what", "why", "how", "when", "where", "which", "who", "can", "could", "would",
              "will", "should", "is", "are", "was", "do", "does", "did", "not",
              "never"}  # fmt: skip
    assert FUNCTION_WORDS.isdisjoint(asking)


def test_an_acknowledgement_keeps_its_own_signal() -> None:
    assert PHRASE_SIGNAL in classify("thanks!").signals


@pytest.mark.parametrize("message", ["no worries at all", "hey, you around?"])
def test_a_caller_budget_does_not_fill_a_contentless_message(engine: Engine, message: str) -> None:
    _project(engine)
    ctx = engine.context(message, "ada", token_budget=2000, now=NOW)
    assert ctx.text == "" and ctx.gated is not None
    assert ctx.gated.classification.complexity is Complexity.TRIVIAL
    assert ctx.gated.selected == []
