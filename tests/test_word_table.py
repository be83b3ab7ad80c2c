"""The embedding model's vectors of single words read from its word table (embed.word_table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

from engrain.embed import HashEmbedder, minilm
from engrain.embed.word_table import TABLE_MODELS, WordTable, load_table, word_table


@dataclass
class _Encoding:
    ids: list[int]


class _Pieces:
    """A tokenizer splitting words on ``+`` into pieces with fixed ids."""

    ids: ClassVar[dict[str, int]] = {"violin": 3, "kick": 5, "box": 6, "ing": 7, "'": 9}

    def encode_batch(self, words: list[str], add_special_tokens: bool) -> list[_Encoding]:
        assert not add_special_tokens
        return [_Encoding([self.ids.get(p, 99) for p in w.split("+")]) for w in words]


def _table() -> WordTable:
    ids = np.array([3, 5, 6, 7], dtype=np.int32)
    rows = np.array([[3, 4, 0], [1, 0, 0], [0, 1, 0], [0, 0, 2]], dtype=np.float32)
    return WordTable("m", _Pieces(), ids, rows)


def test_a_word_is_the_unit_mean_of_its_pieces_rows() -> None:
    out = _table().embed(["violin", "kick+box+ing", "kick+'", "zzz"])
    assert out[0] == pytest.approx([0.6, 0.8, 0.0])
    assert out[1] == pytest.approx(np.array([1.0, 1.0, 2.0]) / np.sqrt(6.0))
    # a piece the table lacks (punctuation, an id past its end) is left out; a word
    # of no known piece meets everything at 0
    assert out[2] == pytest.approx([1.0, 0.0, 0.0])
    assert out[3] == pytest.approx([0.0, 0.0, 0.0])


def test_it_counts_a_words_pieces() -> None:
    assert _table().pieces(["violin", "kick+box+ing"]) == [1, 3]


def test_its_vectors_are_a_namespace_of_their_own() -> None:
    assert _table().model_id == "m/words"


def test_only_the_shipped_model_has_a_table() -> None:
    assert {minilm.MODEL_ID} == TABLE_MODELS
    assert word_table(HashEmbedder().model_id) is None
    table = word_table(minilm.MODEL_ID)
    assert table is not None and table is word_table(minilm.MODEL_ID)  # loaded once
    assert table.model_id == f"{minilm.MODEL_ID}/words"


def test_the_shipped_table_holds_every_alphabetic_token() -> None:
    table = load_table()
    out = table.embed(["violin", "kickboxing", "mother-in-law", "qzxv"])
    assert np.linalg.norm(out, axis=1) == pytest.approx([1.0] * 4, abs=1e-5)


@pytest.mark.model
def test_a_one_token_word_is_the_models_vector_of_it(minilm: Any) -> None:
    """The table holds the model run on the token alone: a one-token word's vector is the
    model's to int8 rounding; a word of several pieces only near it."""
    words = ["instruments", "violin", "exercises", "yoga", "painting", "kitchen"]
    table = word_table(minilm.model_id)
    assert table is not None
    model, rows = minilm.embed(words), table.embed(words)
    assert np.sum(model * rows, axis=1) == pytest.approx([1.0] * len(words), abs=2e-3)
    pieces = minilm.embed(["kickboxing"])[0] @ table.embed(["kickboxing"])[0]
    assert 0.6 < pieces < 0.99
    sims = rows @ rows.T  # the relation soft terms read is kept
    assert sims[0, 1] > sims[0, 5] + 0.2
    assert sims[2, 3] > sims[2, 5] + 0.2
