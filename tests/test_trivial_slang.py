"""Chat and gamer slang, and the reviewer's "ship it", as a class (``recall/asides``,
issue 12, session 23): a reply that only praises, agrees or approves the turn before is
trivial, by the rules alone (no model needed), also with a caller's token budget; the same
words beside a failure, a question, a new point or an act handed to the assistant keep a
message a message. Examples written for these tests; the short-message sets' tune halves
hold "bet", "sick", "bless", "ngl that's clean" (trivial) and "ok bet, now do prod", "fr?
since when", "ngl still broken", "do it", "go ahead" (not)."""

from __future__ import annotations

import pytest

from engrain import Engine
from engrain.recall import acknowledgement as ack
from engrain.recall.classify import Complexity, Intent, classify
from engrain.recall.trivial import PHRASE_SIGNAL, is_trivial, trivial_signal

from .conftest import NOW
from .test_gating import _project


@pytest.mark.parametrize(
    "message",
    [
        # gamer slang: the round is over, well played, easy
        "gg", "gg ez", "gg wp", "ggwp", "ggs", "gj", "ez", "ezpz", "pog", "poggers",
        # chat slang of praise and agreement
        "based", "goated", "sheesh", "lfg", "fr", "fr fr", "no cap", "say less", "slay",
        "clutch", "W", "facts", "bless", "gg, ty!",
        # the reviewer's verdict closing the reply, after thanks or an approval or alone
        "thx, ship it", "ship it", "lgtm, ship it", "looks good, ship it", "ty ship it",
        "great, ship it 🚀", "lgtm ship it!", ":shipit:",
    ],
)  # fmt: skip
def test_slang_and_the_reviewers_verdict_are_trivial_by_the_rules(message: str) -> None:
    assert trivial_signal(message) == PHRASE_SIGNAL
    assert classify(message).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "message",
    [
        # an act handed to the assistant, or "ship it" with its object or its time
        "can you ship it?", "please ship it", "then ship it", "should we ship it?",
        "ship it to staging first", "ship it now", "ship it and tag it", "don't ship it",
        "dont ship it yet", "thx, merge it", "ok, do it",
        # slang beside a failure, a question or a new point
        "gg, now the tests", "ggs but the build is red", "gg it's still failing",
        "no cap still broken", "fr still slow", "fr? since when", "ok bet, now do prod",
        "say less, now do the docs", "W but why", "ez fix?", "no cap on retries?",
        # the same letters as content
        "wp-admin is down", "based on what?", "facts table is empty", "is it valid json",
    ],
)  # fmt: skip
def test_slang_with_work_around_it_stays_a_message(message: str) -> None:
    assert not is_trivial(message)
    assert classify(message).complexity is not Complexity.TRIVIAL


@pytest.mark.parametrize("message", ["gg ez", "thx, ship it", "say less"])
def test_slang_gets_no_memory_even_with_a_budget(engine: Engine, message: str) -> None:
    _project(engine)
    for budget in (None, 2000):
        ctx = engine.context(message, "ada", token_budget=budget, now=NOW)
        assert ctx.text == "" and ctx.gated is not None and ctx.gated.selected == []


def test_ship_it_with_its_object_gets_memory(engine: Engine) -> None:
    _project(engine)
    ctx = engine.context("thx, ship it to prod", "ada", token_budget=2000, now=NOW)
    assert ctx.gated is not None
    assert ctx.gated.classification.complexity is not Complexity.TRIVIAL


@pytest.mark.parametrize("message", ["thanks!", "gg ez", "thx, ship it", "👍", "morning!"])
def test_a_trivial_reply_is_read_as_the_social_intent(message: str) -> None:
    # every labelled reading (the writers' 31 acknowledgements of the training files, the
    # second reader's rule "greeting: greetings, thanks, acknowledgements, emoji") names it
    # greeting
    assert classify(message).intent is Intent.GREETING


def test_a_reply_a_model_makes_trivial_is_read_as_the_social_intent() -> None:
    rules = classify("tip top")
    assert rules.intent is Intent.DISCUSSION and rules.complexity is not Complexity.TRIVIAL
    made = ack.made_trivial(rules, "model: acknowledgement p=0.99")
    assert (made.complexity, made.intent, made.domains) == (
        Complexity.TRIVIAL, Intent.GREETING, ()
    )  # fmt: skip
