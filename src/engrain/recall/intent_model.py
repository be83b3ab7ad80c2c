"""A learned second opinion on a message's intent (relevance gating, step 1): a multinomial
logistic regression over the query's MiniLM embedding, the rules' own verdict and signals,
and the message's shape. No LLM; one 430×7 product, well under a millisecond.

The rules (:mod:`engrain.recall.classify`) were tuned on the messages they were written
against; on messages written later by someone else they read many requests, reports and
opinions as the wrong intent. The embedding carries what the rules' word lists miss
(phrasings no list holds), and the rules' verdict carries what the embedding misses (a
continuation's turn, a pasted error line). The model is trained by
``bench/train_classifier.py`` (deterministic) on the labelled messages of
``bench/gating/`` that are not the gating evaluation's held half; its cross-validated
accuracy, and the rules', are in ``docs/decisions.md``.

It applies only to vectors of the embedder it was trained on (:data:`MODEL_FILE` records its
model id): any other embedder — the hashing one in tests, a caller's own — keeps the rules'
verdict. Complexity is then decided by the rules from the model's intent, as the seed's
table ties complexity to what the message asks for.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from engrain.errors import ConfigError
from engrain.recall import acknowledgement
from engrain.recall.classify import (
    DECIDED,
    Classification,
    Complexity,
    Intent,
    complexity_for,
)

#: The trained weights, shipped with the package (``bench/train_classifier.py`` writes it).
MODEL_FILE = Path(__file__).with_name("intent_model.npz")

INTENTS: tuple[Intent, ...] = tuple(Intent)
COMPLEXITIES: tuple[Complexity, ...] = tuple(Complexity)
#: The rules' signals used as features (the ones that say something about intent or shape).
SIGNALS: tuple[str, ...] = (
    "code", "history_reference", "turn>5", "symptom", "follow-up", "procedure",
    "deliberation", "request in the final question", "problem word", "jargon", "many parts",
    "architecture", "multi-file", "long", "rationale", "revision", "quick", "how-to", "short",
    "error line", "snippet",
)  # fmt: skip
#: First words that open a message of one kind or another.
FIRST_WORDS: tuple[str, ...] = (
    "what", "how", "why", "which", "where", "who", "when", "can", "could", "is", "are", "do",
    "does", "should", "please", "and", "so", "ok", "i", "we", "the", "write", "add", "make",
    "explain", "fix",
)  # fmt: skip
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

Floats = npt.NDArray[np.float64]


class Model(NamedTuple):
    """The trained weights: standardisation, then ``z @ weights + bias`` over :data:`INTENTS`."""

    embedder: str
    mean: Floats
    scale: Floats
    weights: Floats
    bias: Floats


def shape(text: str, turn: int) -> list[float]:
    """The message's shape: its length in characters and words, sentences, questions, lines,
    commas and "and"s, the turn, and its first word among :data:`FIRST_WORDS`."""
    stripped = text.strip()
    low = stripped.lower()
    words = _WORD.findall(low)
    sentences = [s for s in _SENTENCE_END.split(stripped) if s]
    first = words[0] if words else ""
    return [
        float(np.log1p(len(stripped))), float(np.log1p(len(words))), float(len(sentences)),
        float(stripped.count("?")), float("\n" in stripped), float(stripped.count(",")),
        float(low.count(" and ")), float(turn > 0), float(turn > 5), float(len(stripped) < 50),
        float(len(stripped) > 200), float(len(stripped) > 400),
        *(float(first == w) for w in FIRST_WORDS),
    ]  # fmt: skip


def features(rules: Classification, text: str, vector: npt.ArrayLike) -> Floats:
    """One row of features: the query ``vector``, the rules' intent and complexity (one-hot)
    and :data:`SIGNALS`, and :func:`shape`."""
    fired = set(rules.signals)
    row = [
        *(float(rules.intent is i) for i in INTENTS),
        *(float(rules.complexity is c) for c in COMPLEXITIES),
        *(float(s in fired) for s in SIGNALS),
        *shape(text, rules.turn),
    ]
    return np.concatenate([np.asarray(vector, dtype=np.float64).ravel(), np.asarray(row)])


@lru_cache(maxsize=1)
def load(path: Path = MODEL_FILE) -> Model | None:
    """The model at ``path``, or None when the package ships none."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return Model(
                str(data["embedder"]), data["mean"].astype(np.float64),
                data["scale"].astype(np.float64), data["weights"].astype(np.float64),
                data["bias"].astype(np.float64),
            )  # fmt: skip
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(f"the intent model {path} cannot be read: {exc}") from exc


def predict(model: Model, row: Floats) -> Intent:
    """The intent ``model`` gives the feature ``row``."""
    scores = ((row - model.mean) / model.scale) @ model.weights + model.bias
    return INTENTS[int(np.argmax(scores))]


def embedder_of(embed_query: Callable[[str], Any]) -> str | None:
    """The model id of the embedder whose bound ``embed_query`` method this is, if it says."""
    owner = getattr(embed_query, "__self__", None)
    model_id = getattr(owner, "model_id", None)
    return model_id if isinstance(model_id, str) else None


def applies(embedder: str | None) -> bool:
    """Whether the shipped model reads vectors of ``embedder`` (a model id)."""
    model = load()
    return model is not None and embedder is not None and model.embedder == embedder


def refine(
    rules: Classification, message: str, vector: npt.ArrayLike, embedder: str | None
) -> Classification:
    """``rules`` with the model's intent when the model applies to ``embedder``'s vectors
    and disagrees (signal ``model intent: <rules> → <model>``); the complexity is then the
    rules' for that intent. A message asking for analysis or for code in the seed's words
    (:data:`~engrain.recall.classify.DECIDED`) keeps the rules' intent. A trivial message is
    left as it is; a short reply the
    acknowledgement model reads as one (:func:`engrain.recall.acknowledgement.refine`)
    becomes trivial, and so does one this model reads as a greeting
    (:func:`~engrain.recall.acknowledgement.short_reply`: no question mark, no number, no
    request for work on the turn before, nothing that keeps that work open) and holds a
    social word, as the seed's greetings are."""
    acknowledged = acknowledgement.refine(rules, message, vector, embedder)
    if acknowledged is not rules:
        return acknowledged
    model = load()
    if model is None or model.embedder != embedder or rules.complexity is Complexity.TRIVIAL:
        return rules
    if DECIDED.intersection(rules.signals):
        return rules  # "Review this change: <diff>" is a review, whatever code it quotes
    row = features(rules, message, vector)
    if row.shape != model.mean.shape:
        return rules
    intent = predict(model, row)
    if intent is Intent.GREETING and acknowledgement.greeting(rules, message):
        # the seed's greetings are trivial: a short reply read as one asks nothing
        return acknowledgement.made_trivial(rules, f"model intent: {rules.intent.value} → greeting")
    return with_intent(rules, message, intent)


def with_intent(rules: Classification, message: str, intent: Intent) -> Classification:
    """``rules`` read as ``intent``: the same when it agrees or the message is trivial, else
    with the rules' complexity for that intent (signal ``model intent: <rules> → <model>``)."""
    if intent is rules.intent or rules.complexity is Complexity.TRIVIAL:
        return rules
    fired = [f"model intent: {rules.intent.value} → {intent.value}"]
    complexity = complexity_for(message, intent, rules.domains, fired)
    return replace(rules, intent=intent, complexity=complexity, signals=(*rules.signals, *fired))
