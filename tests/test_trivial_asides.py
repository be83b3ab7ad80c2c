"""Short replies that speak of the user, not of the work (``recall/asides``, issue 12,
session 22): a message sent to the wrong place, the user's own slip, small talk, relief,
sign-offs and acknowledgements in other languages, the user's next step with more verbs —
trivial, also with a caller's token budget; and the same words with a failure, a request
or content around them keep a message a message. Examples written for these tests, beside
the second short-message set's tune half (``bench/gating/short-messages-2.jsonl``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engrain import Engine
from engrain.embed.minilm import MODEL_ID
from engrain.recall import acknowledgement as ack
from engrain.recall import intent_model as im
from engrain.recall.asides import fails_to_work
from engrain.recall.classify import Complexity, classify
from engrain.recall.open_work import keeps_work_open
from engrain.recall.trivial import asks_for_work, is_trivial, words_said

from .conftest import NOW
from .test_gating import _project

SECOND_SET = Path(__file__).resolve().parent.parent / "bench/gating/short-messages-2.jsonl"


@pytest.mark.parametrize(
    "message",
    [
        # sent to the wrong place, or taken back
        "sry that was for my teammate", "oops, that wasn't meant for you 😅",
        "lol wrong chat", "sorry, wrong window", "sorry, mistake message",
        "please disregard my last message",
        # the user's own slip
        "ah, is my fault, sorry", "tranqui, era mi culpa", "my fault", "it was a typo on my side",
        # small talk
        "how's your day going?", "how are you?", "hey, how are you doing?",
        # relief
        "ugh finally lol", "uff por fin", "finally!", "honestly that's a relief",
        # sign-offs and acknowledgements in other languages
        "à plus", "hasta luego!", "bis morgen", "listo, funcionó", "entendido, gracias",
        "ありがとうございます", "了解です", "хорошо", "d'accord", "genau",
        # the user's next step: more verbs, a bare "I", other languages
        "ok, I check with my senior", "will circle back after the sync",
        "ok, tomorrow I continue", "i'll ask the team", "let me think about it",
        "mañana lo pruebo", "ok, lo miro con el equipo", "je regarde ça demain",
        "ich schaue mal nach", "vou testar isso amanhã",
        # an apology spelt fast
        "sory for late reply",
    ],
)  # fmt: skip
def test_these_short_replies_are_trivial(message: str) -> None:
    assert is_trivial(message)
    assert classify(message).complexity is Complexity.TRIVIAL


@pytest.mark.parametrize(
    "message",
    [
        # a failure: a word of working negated, in any language the rules know
        "no funciona", "ça marche pas", "funktioniert nicht", "não funciona, obrigado",
        "ok no funciona", "gracias, pero no funciona",
        # the words of an aside with the work around them
        "sorry, wrong channel",  # a channel may be the code's ("posts to the wrong channel")
        "wrong thread", "this was for staging", "that is for the worker",
        "typo in the config", "sorry, I meant the staging cluster",
        "how's it going with the migration?", "what's up with the build?",
        "finally add the tests", "ugh still broken", "uff, same error",
        # a next step without its subject is a request; negated, the user will not
        "check it tomorrow", "ask the team", "no lo pruebo", "i won't check it",
        "i'll ask the team?", "will test it on staging?",  # asked, not announced
        "i think it's the cache", "let me see the logs",
        # other languages' yes with a question
        "si, pero en staging?", "d'accord, et pour la prod ?",
    ],
)  # fmt: skip
def test_a_failure_a_request_or_content_keeps_these_a_message(message: str) -> None:
    assert not is_trivial(message)
    assert classify(message).complexity is not Complexity.TRIVIAL


@pytest.mark.parametrize(
    ("words", "fails"),
    [
        (["no", "funciona"], True), (["ça", "marche", "pas"], True),
        (["funktioniert", "nicht"], True), (["not", "working"], True),
        (["never", "worked"], True), (["funciona"], False), (["works", "now"], False),
        (["no", "it", "works"], False),  # the negation answers; it is not beside the word
    ],
)  # fmt: skip
def test_a_negation_beside_a_word_of_working_is_a_failure(words: list[str], fails: bool) -> None:
    assert fails_to_work(words) is fails


@pytest.mark.parametrize(
    "message", ["hazlo", "vas-y", "allez-y", "mach weiter", "adelante", "fais-le", "go for it",
                "no funciona", "ça marche pas"],
)  # fmt: skip
def test_no_model_may_read_a_request_to_go_on_or_a_failure_as_nothing(message: str) -> None:
    assert keeps_work_open(message, words_said(message))
    assert not ack.short_reply(classify(message), message)


@pytest.mark.model
def test_the_models_keep_a_request_to_go_on_in_another_language(minilm) -> None:  # type: ignore[no-untyped-def]
    texts = ["hazlo", "vas-y", "mach weiter", "no funciona"]
    read = [im.refine(classify(t), t, v, MODEL_ID) for t, v in zip(texts, minilm.embed(texts),
                                                                   strict=True)]  # fmt: skip
    assert [r.complexity is Complexity.TRIVIAL for r in read] == [False] * len(texts)


@pytest.mark.parametrize("message", ["sry that was for my teammate", "how's your day going?",
                                     "了解です", "mañana lo pruebo"])  # fmt: skip
def test_an_aside_gets_no_memory_even_with_a_budget(engine: Engine, message: str) -> None:
    _project(engine)
    for budget in (None, 2000):
        ctx = engine.context(message, "ada", token_budget=budget, now=NOW)
        assert ctx.text == "" and ctx.gated is not None and ctx.gated.selected == []


def test_a_failure_in_another_language_gets_memory_with_a_budget(engine: Engine) -> None:
    _project(engine)
    ctx = engine.context("no funciona", "ada", token_budget=2000, now=NOW)
    assert ctx.gated is not None
    assert ctx.gated.classification.complexity is not Complexity.TRIVIAL


def test_the_second_set_states_its_rule_and_splits_by_writer() -> None:
    lines = [json.loads(line) for line in SECOND_SET.read_text().splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    assert "rule" in header and "text" not in header
    assert len(rows) >= 300 and len(header["writers"]) >= 6
    halves = {r["writer"]: set() for r in rows}
    for r in rows:
        halves[r["writer"]].add(r["split"])
    assert all(len(s) == 1 for s in halves.values())  # a writer is in one half only
    assert {r["label"] for r in rows} == {"trivial", "not"}
    assert len({r["text"] for r in rows}) == len(rows)


@pytest.mark.parametrize(
    "message",
    ["thx, now the header", "ok but slower", "top, now dark mode", "ok, ahora en staging",
     "ok genau so, aber async", "finally, now add retries", "cool, next: the alerts",
     "merci, mais en anglais"],
)  # fmt: skip
def test_an_acknowledgement_that_turns_to_a_new_point_is_a_message(message: str) -> None:
    assert not is_trivial(message)
    assert not ack.short_reply(classify(message), message)  # no model reads it as nothing


@pytest.mark.parametrize(
    "message", ["works now, thanks", "ok now it works", "ah ok now i get it", "nice, but no rush"]
)
def test_a_turn_word_with_nothing_new_after_it_opens_no_point(message: str) -> None:
    assert not asks_for_work(message)  # the models may read it as an acknowledgement


@pytest.mark.parametrize("message", ["works now, thanks", "ok now it works", "nice, but no rush"])
def test_the_rules_keep_these_trivial(message: str) -> None:
    assert is_trivial(message)


@pytest.mark.model
def test_the_models_keep_an_acknowledgement_with_a_new_point(minilm) -> None:  # type: ignore[no-untyped-def]
    texts = ["top, now dark mode", "ok, ahora en staging", "finally, now add retries"]
    read = [im.refine(classify(t), t, v, MODEL_ID) for t, v in zip(texts, minilm.embed(texts),
                                                                   strict=True)]  # fmt: skip
    assert [r.complexity is Complexity.TRIVIAL for r in read] == [False] * len(texts)


def test_a_bare_we_does_not_announce_the_users_next_step() -> None:
    assert not is_trivial("ok we test in prod")  # may propose: left to the rules
    assert is_trivial("ok, we'll test it tomorrow")
