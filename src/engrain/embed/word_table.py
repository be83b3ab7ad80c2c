"""The embedding model's vectors of single words, read from a table instead of run (issue 15).

``recall.soft_terms`` needs a vector per word of a conversation ("instruments", "violin").
Run through the model, each word costs a full model run (~1-2 ms of CPU), thousands per
conversation. But a word that is one WordPiece token embedded as a text is the model run
on ``[CLS] token [SEP]``, the same for every store and every process: so
``scripts/build_word_table.py`` runs it once per alphabetic token of the vocabulary and
ships the results (``embed/minilm/words.npz``, int8 rows with a scale each, 26,503 tokens).
Here a word is split into its WordPiece tokens by the model's own tokenizer and gets the
mean of their rows: the model's exact vector (to int8 rounding) for the 81% of LoCoMo's
chunk words that are one token, an approximation for the others ("kickboxing": kick
##box ##ing). No model run: ~15-25 µs of CPU a word against ~1.4-2.7 ms for a run.

Only the model the table was built from has one (:func:`word_table` by model id); a word
table's vectors are a namespace of their own (:attr:`WordTable.model_id`), never mixed with
the embedding cache's vectors of texts.

Concurrency: a table is read-only once loaded; :func:`word_table` loads it once per process
(``functools.lru_cache``, which may load it twice under a race: both equal, one kept).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

from engrain.embed import minilm
from engrain.errors import EmbeddingError

#: The table's file, next to the model's tokenizer in ``embed/minilm``.
TABLE_FILE = "words.npz"
#: The ids of the models with a word table (the shipped MiniLM's, whichever graph runs it:
#: the int8 graph's word vectors are within a cosine of 0.9998 of the float graph's).
TABLE_MODELS = frozenset({minilm.MODEL_ID})


class WordTable:
    """Unit vectors of words from per-token rows: a word is the mean of its tokens' rows."""

    def __init__(
        self,
        model_id: str,
        tokenize: Any,
        ids: npt.NDArray[np.integer[Any]],
        rows: npt.NDArray[np.floating[Any] | np.integer[Any]],
        scales: npt.NDArray[np.float32] | None = None,
    ) -> None:
        """``tokenize``: a ``tokenizers.Tokenizer`` (its ``encode_batch``); token
        ``ids[i]``'s vector is ``rows[i] × scales[i]`` (kept as given: the shipped int8
        rows take 10 MB, as float32 they would take 40)."""
        #: The namespace of this table's vectors (not the model's: a text's vector is not
        #: a table row).
        self.model_id = f"{model_id}/words"
        self._tokenize = tokenize
        self._at = np.full(int(ids.max()) + 1, -1, dtype=np.intp)
        self._at[ids] = np.arange(len(ids))
        self._rows = rows
        self._scales = np.ones(len(rows), np.float32) if scales is None else scales

    def embed(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        """One unit row per word: the mean of the rows of its tokens the table holds (a
        word none of whose tokens it holds, which no word of ASCII letters is, gets a row
        of zeros: it meets every word at 0)."""
        out = np.zeros((len(words), self._rows.shape[1]), dtype=np.float32)
        encodings = self._tokenize.encode_batch(list(words), add_special_tokens=False)
        for i, encoding in enumerate(encodings):
            ids = np.asarray(encoding.ids, dtype=np.intp)
            at = self._at[ids[ids < len(self._at)]]
            at = at[at >= 0]
            if len(at):
                out[i] = (self._rows[at] * self._scales[at, None]).mean(axis=0)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def pieces(self, words: Sequence[str]) -> list[int]:
        """How many WordPiece tokens each of ``words`` is (1: its row is the model's vector
        of the word; more: the mean of its pieces')."""
        encodings = self._tokenize.encode_batch(list(words), add_special_tokens=False)
        return [len(encoding.ids) for encoding in encodings]


def load_table(model_id: str = minilm.MODEL_ID) -> WordTable:
    """The shipped table of ``model_id`` (see :data:`TABLE_MODELS`)."""
    try:
        from tokenizers import Tokenizer

        folder = resources.files("engrain.embed") / "minilm"
        tokenizer = Tokenizer.from_str((folder / "tokenizer.json").read_text(encoding="utf-8"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        with (folder / TABLE_FILE).open("rb") as fh, np.load(fh) as data:
            ids, rows, scales = data["ids"], data["rows"], data["scales"]
    except Exception as exc:
        raise EmbeddingError(f"cannot load the word table of {model_id}: {exc}") from exc
    return WordTable(model_id, tokenizer, ids, rows, scales.astype(np.float32))


@functools.lru_cache(maxsize=len(TABLE_MODELS))
def word_table(model_id: str) -> WordTable | None:
    """The process's word table of ``model_id``, loaded on first use; None for a model
    without one."""
    return load_table(model_id) if model_id in TABLE_MODELS else None


def table_words(
    model_id: str,
) -> tuple[str, Callable[[Sequence[str]], npt.NDArray[np.float32]]] | None:
    """The namespace of ``model_id``'s word table and a batch embedder reading it, which
    loads the table at its first call (a process whose questions never meet two
    conversation chunks never loads it); None for a model without a table."""
    if model_id not in TABLE_MODELS:
        return None
    return f"{model_id}/words", functools.partial(_table_embed, model_id)


def _table_embed(model_id: str, words: Sequence[str]) -> npt.NDArray[np.float32]:
    table = word_table(model_id)
    assert table is not None  # only bound to a model of TABLE_MODELS
    return table.embed(words)
