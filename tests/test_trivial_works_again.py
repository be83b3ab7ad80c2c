"""A reply reporting that something works again (``recall/trivial``; issue 12, session 29): a
verb of working in the present or a good state, with the word that says the state changed
("reminders are flowing again", "loads fast now", "recon's quiet again"), or a state reached
by repair after "is" ("the queue's unstuck", "staging is back up"), is a success report: the
conversation's work is closed, no memory can help the answer, with or without a caller's
token budget. The same words beside a failure, a contrast, a question, a request, a
condition, a check asked for or a new subject keep a message a message, and so does a part
out of service ("it's down right now", which a model read as an acknowledgement). Examples written
for these tests; wrench's tune half holds "reminders are flowing again 🎉" and "sweet,
ridgeline's board loads fast now", anvil's "recon's quiet again 🎉"."""

from __future__ import annotations

import pytest

from engrain import Engine
from engrain.embed.minilm import MODEL_ID
from engrain.recall import acknowledgement as ack
from engrain.recall import intent_model as im
from engrain.recall.classify import Complexity, Intent, classify
from engrain.recall.open_work import keeps_work_open
from engrain.recall.trivial import PHRASE_SIGNAL, trivial_signal, words_said

from .conftest import NOW
from .test_gating import _project


@pytest.mark.parametrize(
    "message",
    [
        # a verb of working in the present, then the change ("now", "again", "finally")
        "reminders are flowing again 🎉", "sweet, ridgeline's board loads fast now",
        "the export works again", "webhooks are sending again, thanks!",
        "the invoice renders properly now", "is working now, thanks",
        "sync's running again 🙌", "the bot connects now",
        "ok, the cli boots fast again", "search responds instantly now, ty",
        # a good state with its change
        "recon's quiet again 🎉", "the board is snappy now", "fills look sane now, thx",
        "the dashboard seems stable again",
        # a state reached by repair
        "the queue is unstuck", "the queue's unstuck now", "staging is back up",
        "the bot is back online", "payments are up and running again",
        "the login bug is fixed now",  # said of a problem, it says the problem is gone
    ],
)  # fmt: skip
def test_a_part_reported_working_again_is_trivial(message: str) -> None:
    assert trivial_signal(message) == PHRASE_SIGNAL
    reading = classify(message)
    assert (reading.complexity, reading.intent) == (Complexity.TRIVIAL, Intent.GREETING)


NEAR_MISSES = [
    # a failure, a contrast, persistence or a condition beside the outcome
    "the deploy's out but the dashboard is empty", "it loads now but slowly",
    "sync works again but only for admins", "loads fast now except on mobile",
    "it works now, still slow on mobile", "if it loads fast now, ship it",
    "once sync works again, rerun the import",
    # a question or a request after it, or a new subject
    "tests pass now — next, the migration?", "works now, can you add the retry too",
    "loads fast now, what about mobile", "loads fast now, the footer",
    "the board loads fast now, exports are slow", "works again, now do the csv export",
    # a check asked for
    "make sure it works again", "verify it works now", "check page loads fast now",
    # what works is the failure, or the state returned may be bad
    "errors are flowing again", "timeouts are back up", "the crash loop is running again",
    "the lag is back", "it's down right now", "the spinner is loading again",
    # a one-off act repeated, a place that narrows, a description without the change
    "the cron ran again", "the email sent again", "it runs fine locally",
    "it works now on staging only", "the page loads fast", "it's sending duplicates again",
    "the job is running twice again",
    # asked without a question mark
    "is it running again", "is staging back up", "pls run again",
    # a number in the subject
    "v2 loads fast now",
]  # fmt: skip


@pytest.mark.parametrize("message", NEAR_MISSES)
def test_an_outcome_beside_work_left_open_stays_a_message(message: str) -> None:
    assert trivial_signal(message) is None
    assert classify(message).complexity is not Complexity.TRIVIAL


@pytest.mark.model
@pytest.mark.parametrize("message", NEAR_MISSES)
def test_no_model_makes_an_outcome_beside_open_work_trivial(  # type: ignore[no-untyped-def]
    minilm, message: str
) -> None:
    rules = classify(message)
    read = im.refine(rules, message, minilm.embed([message])[0], MODEL_ID)
    assert read.complexity is not Complexity.TRIVIAL


@pytest.mark.parametrize(
    "message",
    ["reminders are flowing again 🎉", "sweet, ridgeline's board loads fast now",
     "the queue's unstuck now"],
)  # fmt: skip
def test_these_reports_get_no_memory_even_with_a_budget(engine: Engine, message: str) -> None:
    _project(engine)
    for budget in (None, 2000):
        ctx = engine.context(message, "ada", token_budget=budget, now=NOW)
        assert ctx.text == "" and ctx.gated is not None and ctx.gated.selected == []


OUTAGES = ["it's down right now", "it's down again", "staging is down", "the worker went offline"]


@pytest.mark.parametrize("message", OUTAGES)
def test_a_part_out_of_service_keeps_the_work_open(message: str) -> None:
    """The opposite of "back up": an outage needs the project's memory as a failure does."""
    assert keeps_work_open(message, words_said(message))
    assert not ack.short_reply(classify(message), message)


@pytest.mark.model
@pytest.mark.parametrize("message", OUTAGES)
def test_no_model_makes_an_outage_trivial(minilm, message: str) -> None:  # type: ignore[no-untyped-def]
    # the acknowledgement model read "it's down right now" and "it's down again" as
    # acknowledgements (p 0.90, 0.95) before open_work.OUT_OF_SERVICE
    rules = classify(message)
    read = im.refine(rules, message, minilm.embed([message])[0], MODEL_ID)
    assert read.complexity is not Complexity.TRIVIAL
