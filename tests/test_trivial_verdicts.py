"""Trivial by the rules, or not (issue 12, session 25): a verdict on the state of the work
in the present with its subject before it ("staging looks good"), "worked" and "did the
trick" with theirs, a presence check without its question mark or asking for a moment
("are you around", "hey, got a sec?"), someone's feelings about the outcome ("Tomas will be
pleased"), apologies and a message sent to the wrong window in the other languages whose
thanks the rules know, a point conceded ("fair point") or a guess confirmed ("that's what
i thought") ask nothing. Each shape beside the same words that keep a message a message.
Examples written for these tests; the shapes came from the tune halves
(``trivial-kestrel.jsonl``, ``short-messages*.jsonl``) and from the classes issue 12 names."""

from __future__ import annotations

import pytest

from engrain.recall.classify import Complexity, classify
from engrain.recall.trivial import is_trivial


@pytest.mark.parametrize(
    "message",
    [
        # a verdict on the state of the work, its subject before it
        "prod looks good", "the dashboards look clean now", "replay looks fine, thanks",
        "the nightly is green again.", "ngl that's clean", "everything seems fine 👍",
        "the new index looks solid", "the diff looks good to me",
        # an outcome told in the past with its subject; a second attempt named by its time
        "backfill worked, cheers", "the fix worked!", "cache flush did the trick",
        "the rerun passed this time 🙏", "the canary passed at last",
        # a presence check without its mark, or asking for a moment of the one addressed
        "are you around", "anyone here", "ping", "ping?", "you busy", "hey, you free?",
        "hey, got a sec?", "got a minute?", "yo, have you got a moment?",
        # someone's feelings about the outcome
        "nice one, Priya will be pleased", "the team's gonna be thrilled", "ok, ops will be happy",
        # apologies and misdirection in the other languages
        "désolé", "perdón!", "entschuldigung", "ah, mauvaise fenêtre", "sorry, falsches fenster",
        "my bad, ignore that", "ça marche, merci",
        # a point conceded, a guess confirmed
        "fair point", "Fair point.", "yes, that's what i thought",
        "yeah that's what I was afraid of lol",
    ],
)  # fmt: skip
def test_these_short_replies_ask_nothing(message: str) -> None:
    assert is_trivial(message)
    assert classify(message).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "message",
    [
        # a verdict that narrows where it holds, is asked, turned, negated or not reached
        "it looks fine locally", "looks good on staging but not prod", "is staging looking good",
        "staging looks good?", "looks good, now add the tests", "the plot doesn't look right",
        "still looks good?", "v2 looks good",  # a number in the subject
        "the new retry logic in the worker looks good",  # more than a subject before it
        "clean the cache",  # "clean" as a verb asks
        # worked or did the trick narrowed, negated or asked
        "it worked on staging", "nothing worked", "what worked before?", "did the trick?",
        "the restart did the trick but now it leaks",
        # a presence word that reports a thing; a moment asked with a request
        "still there", "the banner is still there", "free?", "is it free?",
        "got a minute to look at the deploy?", "hey got a sec, the deploy failed",
        "ping the db", "are u still working",
        # feelings with a condition; a take-back with a request
        "the customer will be happy if it works", "ignore that warning", "ignore that and retry",
        # failures in the other languages; a guess with a question after it
        "ça marche pas", "ça ne marche pas", "that's what i thought, but why does it fail",
    ],
)  # fmt: skip
def test_these_short_replies_stay_messages(message: str) -> None:
    assert not is_trivial(message)
    assert classify(message).complexity is not Complexity.TRIVIAL
