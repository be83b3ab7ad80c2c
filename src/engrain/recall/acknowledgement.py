"""A learned reading of short replies that ask nothing (relevance gating, step 1): a binary
logistic regression over the query's MiniLM embedding and the message's shape says whether a
short message the rules left non-trivial is an acknowledgement all the same ("tip top",
"grand", "word" — words no list of acknowledgements holds for every writer).

The rules (:mod:`engrain.recall.trivial`) know a fixed vocabulary; every writer of the
project's evaluation brought acknowledgements the list lacked. The embedding knows the
register of a reply, not its words. It is asked only where a miss is possible and cheap to
get wrong the other way: a message the rules call non-trivial, shorter than the seed's 50
characters, with no question mark, no code and no number, that the rules read as a discussion
or a greeting (a request, a question, a report of a problem or a follow-up are never turned
into nothing: a verb with its object, "run it", or a word pointing back at the turn before,
"same thing", "next", keeps a reply a request, and a word that keeps the work open, "no
luck", "still red", "continue", "wym", "that one", keeps it a message:
:mod:`engrain.recall.open_work`). It answers only above :data:`THRESHOLD`,
chosen by leaving each writer's file out (``bench/train_ack.py``, ``docs/decisions.md``).
The vector is the one the gate computes for the pool anyway: no second embedding.

Like the intent model it applies only to vectors of the embedder it was trained on.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from engrain.errors import ConfigError
from engrain.recall.classify import Classification, Complexity, Intent
from engrain.recall.open_work import keeps_work_open
from engrain.recall.trivial import (
    SHORT,
    asks_for_work,
    says_something_social,
    words_said,
)

#: The trained weights, shipped with the package (``bench/train_ack.py`` writes it).
MODEL_FILE = Path(__file__).with_name("ack_model.npz")
#: The probability above which a short discussion is read as an acknowledgement.
THRESHOLD = 0.8
#: The rules' intents the model may overrule: the fallback reading of a short remark.
OPEN_INTENTS = frozenset({Intent.DISCUSSION, Intent.GREETING})

_WORD = re.compile(r"\w+")
_EMOJI = re.compile("[\U0001f300-\U0001faff\u2600-\u27bf]")
_DIGIT = re.compile(r"\d")

Floats = npt.NDArray[np.float64]


class AckModel(NamedTuple):
    """Standardisation, then ``z @ weights + bias`` (one logit: acknowledgement)."""

    embedder: str
    mean: Floats
    scale: Floats
    weights: Floats
    bias: float


def shape(text: str) -> list[float]:
    """The reply's shape, no word list: its length in characters and words, an exclamation
    mark, an emoji, and whether it is very short (under 20 characters)."""
    stripped = text.strip()
    words = _WORD.findall(stripped)
    return [
        float(np.log1p(len(stripped))), float(np.log1p(len(words))), float("!" in stripped),
        float(bool(_EMOJI.search(stripped))), float(len(stripped) < 20),
    ]  # fmt: skip


def features(text: str, vector: npt.ArrayLike) -> Floats:
    """One row: the query ``vector`` then :func:`shape`."""
    return np.concatenate([np.asarray(vector, dtype=np.float64).ravel(), np.asarray(shape(text))])


def eligible(rules: Classification, text: str) -> bool:
    """Whether the model may read ``text``: a :func:`short_reply` the rules read as a
    discussion or a greeting."""
    return rules.intent in OPEN_INTENTS and short_reply(rules, text)


def greeting(rules: Classification, text: str) -> bool:
    """Whether a short reply the intent model reads as a greeting may be made trivial, as
    the seed's greetings are: a :func:`short_reply` (whatever intent the rules guessed from
    a word of it: "ok i am understand now" is no analysis, "is working now, thank" no
    question; what would make it one keeps the work open and is ruled out there), and a
    word in it greets, thanks, acknowledges, praises or laughs
    (:func:`~engrain.recall.trivial.says_something_social`: "ya funciona, gracias", "ok i
    will tryed"; "go ahead" or "as a table" hold none)."""
    return short_reply(rules, text) and says_something_social(text)


def short_reply(rules: Classification, text: str) -> bool:
    """Whether ``text`` is a short reply that may ask nothing: non-trivial by the rules,
    under 50 characters, no question mark, no code, no number, not asking for work on
    the turn before (:func:`~engrain.recall.trivial.asks_for_work`: "try again", "next",
    "this one too") and not keeping that work open
    (:func:`~engrain.recall.open_work.keeps_work_open`: "no luck", "still red",
    "continue", "wym", "that one")."""
    stripped = text.strip()
    return (
        rules.complexity is not Complexity.TRIVIAL
        and not rules.has_code
        and 0 < len(stripped) < SHORT
        and "?" not in stripped
        and not _DIGIT.search(stripped)
        and not asks_for_work(stripped)
        and not keeps_work_open(stripped, words_said(stripped))
    )


@lru_cache(maxsize=1)
def load(path: Path = MODEL_FILE) -> AckModel | None:
    """The model at ``path``, or None when the package ships none."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return AckModel(
                str(data["embedder"]), data["mean"].astype(np.float64),
                data["scale"].astype(np.float64), data["weights"].astype(np.float64).ravel(),
                float(data["bias"]),
            )  # fmt: skip
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(f"the acknowledgement model {path} cannot be read: {exc}") from exc


def probability(model: AckModel, row: Floats) -> float:
    """The probability ``model`` gives that the feature ``row`` is an acknowledgement."""
    logit = float(((row - model.mean) / model.scale) @ model.weights + model.bias)
    return float(1.0 / (1.0 + np.exp(-logit)))


def refine(
    rules: Classification, message: str, vector: npt.ArrayLike, embedder: str | None
) -> Classification:
    """``rules`` made trivial (signal ``model: acknowledgement p=…``) when the model applies
    to ``embedder``'s vectors, the message is :func:`eligible` and the probability reaches
    :data:`THRESHOLD`; otherwise ``rules`` unchanged."""
    model = load()
    if model is None or model.embedder != embedder or not eligible(rules, message):
        return rules
    row = features(message, vector)
    if row.shape != model.mean.shape:
        return rules
    p = probability(model, row)
    if p < THRESHOLD:
        return rules
    return made_trivial(rules, f"model: acknowledgement p={p:.2f}")


def made_trivial(rules: Classification, signal: str) -> Classification:
    """``rules`` made trivial (no domains), ``signal`` saying why; its intent is the social
    register's, greeting, as the rules give a trivial reply."""
    return replace(
        rules, complexity=Complexity.TRIVIAL, intent=Intent.GREETING, domains=(),
        signals=(*rules.signals, signal),
    )  # fmt: skip
