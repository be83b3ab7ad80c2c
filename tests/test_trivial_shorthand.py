"""Chat and radio shorthand, English sign-offs, a slip owned, and a reply trivial clause by
clause (``recall/asides``, ``recall/contentless``, ``recall/trivial``; issue 12, session 28):
each a closed class with its reason, trivial by the rules alone (no model needed), also with
a caller's token budget; the same words beside a request, a failure, a question or a new
point keep a message a message. Examples written for these tests; anvil's held half holds
"10-4", "oh duh, my bad" and "that did it, book's clean" (trivial), the short-message sets'
"ttyl", "tks", "copy", "signing off 👋" (trivial)."""

from __future__ import annotations

import pytest

from engrain import Engine
from engrain.recall.classify import Complexity, Intent, classify
from engrain.recall.trivial import is_trivial

from .conftest import NOW
from .test_gating import _project


@pytest.mark.parametrize(
    "message",
    [
        # radio: received and understood, closing the reply or set off
        "10-4", "ten-four", "10-4, thanks", "wilco", "roger wilco", "copy", "copy all",
        "5x5", "loud and clear", "affirmative", "over and out", "10-4 👍",
        # chat's spellings of thanks, agreement and leaving
        "thnx", "thanx", "tks", "tyty", "ofc", "noice", "ttyl", "gtg", "g2g", "l8r",
        "laters", "ok ttyl", "tks, ttyl",
    ],
)  # fmt: skip
def test_radio_and_chat_shorthand_are_acknowledgements(message: str) -> None:
    reading = classify(message)
    assert (reading.complexity, reading.intent) == (Complexity.TRIVIAL, Intent.GREETING)


@pytest.mark.parametrize(
    "message",
    [
        "signing off", "signing off 👋", "logging off for today", "heading out, thanks",
        "calling it a day", "done for the day", "done for today, cheers", "peace out",
    ],
)  # fmt: skip
def test_an_english_sign_off_is_trivial(message: str) -> None:
    assert is_trivial(message)


@pytest.mark.parametrize("message", ["oh duh, my bad", "duh", "d'oh", "doh, of course", "oh duh"])
def test_a_slip_owned_is_trivial(message: str) -> None:
    assert is_trivial(message)


@pytest.mark.parametrize(
    "message",
    [
        "that did it, book's clean", "tests passing, lint green", "merged - thanks",
        "great, merged, thanks", "that did it, book's clean, thanks", "I'm here. Good luck!",
    ],
)  # fmt: skip
def test_a_reply_whose_every_clause_acknowledges_is_trivial(message: str) -> None:
    assert is_trivial(message)


@pytest.mark.parametrize(
    "message",
    [
        # the same letters asking for an act, or a number of the work
        "copy that file to s3", "copy all the env vars", "copy?", "10-4?", "10-4 split",
        "10 4", "signing off on the PR", "logging out breaks the session",
        "logging off the vpn fixed it",
        # shorthand or a sign-off beside a request, a question or a failure
        "heading out, can you summarize what we did", "done for the day, what's left?",
        "ttyl, remind me about the migration", "ok, copy, but the retry still fails",
        "duh, the cache", "doh, forgot the index. add it", "thnx, now the footer",
        # a clause that asks, or keeps the work open, keeps the reply a message
        "the cron ran, all good", "thanks, book's clean, now the footer", "ok, still",
        "nope, still red", "great, 3 more to go", "thanks. why?", "tests passing, lint red",
        "build passes, deploy fails", "fine, deploy it", "ok. error again",
    ],
)  # fmt: skip
def test_shorthand_and_clauses_with_work_around_them_stay_messages(message: str) -> None:
    assert not is_trivial(message)
    assert classify(message).complexity is not Complexity.TRIVIAL


@pytest.mark.parametrize("message", ["10-4", "oh duh, my bad", "that did it, book's clean"])
def test_these_replies_get_no_memory_even_with_a_budget(engine: Engine, message: str) -> None:
    _project(engine)
    for budget in (None, 2000):
        ctx = engine.context(message, "ada", token_budget=budget, now=NOW)
        assert ctx.text == "" and ctx.gated is not None and ctx.gated.selected == []


@pytest.mark.parametrize(
    "message", ["morning, let's get going", "hi, let's get started", "hey! let's do this"]
)
def test_a_greeting_that_begins_the_session_is_trivial(message: str) -> None:
    assert is_trivial(message)


@pytest.mark.parametrize(
    "message",
    [
        "let's get going", "ok let's get going", "morning, let's get going on the migration",
        "morning, let's start with the failing test",
    ],
)  # fmt: skip
def test_beginning_without_a_greeting_or_with_its_subject_stays_a_message(message: str) -> None:
    assert not is_trivial(message)
