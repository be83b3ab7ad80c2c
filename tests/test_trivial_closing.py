"""Closing phrases whose words are not all acknowledgements (``recall/trivial._CLOSING``,
issue 12, session 11): trivial alone, not when they carry a new point."""

from __future__ import annotations

import pytest

from engrain.recall.classify import Complexity, classify
from engrain.recall.trivial import is_trivial


@pytest.mark.parametrize(
    "message",
    ["+1", "+1 👍", "will try, thx", "will check", "great, thanks for the help!",
     "thanks for explaining 🙏", "thank you so much for the quick fix",
     "oh nice, didn't know that", "good to know", "thanks, that's exactly what I needed",
     "yep, that did the trick", "ok, will keep that in mind", "ah that clears it up"],
)  # fmt: skip
def test_a_closing_phrase_is_trivial(message: str) -> None:
    assert is_trivial(message)
    assert classify(message).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "message",
    ["thanks for the fix but it still fails", "thanks for the fix, why does it retry twice?",
     "thx for that, now add retries", "+1 but use redis", "10+1", "will try the migration?",
     "good to know, which region is it in?", "didn't know that was deprecated, what replaces it",
     "what i needed was a cron job", "what for?", "keep the mind map in sync"],
)  # fmt: skip
def test_a_closing_phrase_with_a_new_point_is_not_trivial(message: str) -> None:
    assert not is_trivial(message)
    assert classify(message).complexity is not Complexity.TRIVIAL


# -- words in any script: a message in Cyrillic or Chinese is not empty of words -----------


@pytest.mark.parametrize(
    "message",
    ["如何重启服务器？", "как перезапустить сервер?", "сервер падает", "спасибо, но сервер падает",
     "Warum schlägt der Build fehl?"],
)  # fmt: skip
def test_a_message_in_another_script_is_not_trivial(message: str) -> None:
    # its words were invisible to an ASCII word pattern, so nothing was left to ask anything
    assert not is_trivial(message)
    assert classify(message).complexity is not Complexity.TRIVIAL


@pytest.mark.parametrize(
    "message", ["спасибо", "谢谢", "ok 谢谢", "ありがとう", "Danke schön!", "dzięki 🙏"]
)
def test_thanks_in_another_script_is_trivial(message: str) -> None:
    assert is_trivial(message)


# -- a report that something is well ("nice, CI's green"), issue 12, session 12 ------------
# a question, a negation or a second subject word keeps a message real
# (``recall.trivial._reports_success``)


@pytest.mark.parametrize(
    "text",
    ["nice, CI's green", "tests passing now", "all green", "build passes", "it compiles!",
     "ok, pipeline green", "yay, it builds"],
)  # fmt: skip
def test_a_report_that_something_is_well_is_trivial(text: str) -> None:
    assert is_trivial(text)
    assert classify(text).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "text",
    ["not green", "still not passing", "CI green?", "is it live", "did it pass",
     "green on 3.12", "make the button green", "the deploy is live but slow",
     "CI is red only on Windows"],
)  # fmt: skip
def test_a_negated_asked_or_longer_report_is_not_trivial(text: str) -> None:
    assert not is_trivial(text)


# -- work reported done with the word naming it ("switchover done, thanks"), session 18 -----


@pytest.mark.parametrize(
    "text",
    ["switchover done, thanks", "backfill done", "ok, rollout complete", "migration finished 🎉",
     "hotfix merged, ty"],
)  # fmt: skip
def test_work_reported_done_is_trivial(text: str) -> None:
    """Like "merged!" or "deployed": the state of the work after an answer asks nothing."""
    assert is_trivial(text)
    assert classify(text).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "text",
    ["switchover done?", "switchover not done", "is the backup done", "done 3 of 5",
     "done with the switchover, now failover", "the switchover is done, what next",
     "backup done but the WAL archive is missing"],
)  # fmt: skip
def test_work_done_asked_negated_or_with_more_to_say_is_not_trivial(text: str) -> None:
    assert not is_trivial(text)
