"""Memories a clear match points to (issue 12, ``recall.pointed``): a typed learning that
shares two uncommon names with the message's clear match and means nearly the same gets the
chain's relevance (the match's times their cosine); one shared name, a different meaning,
the message's own words, common words, conversation chunks or no clear match change
nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engrain import Engine, Kind, Memory
from engrain.embed.base import Matrix
from engrain.model import Provenance
from engrain.recall.pointed import MIN_COSINE, RARE_DF, _uncommon, terms_of, with_pointed
from engrain.recall.relevance import Candidate
from engrain.store import MemoryStore

from .conftest import NOW, make_settings

DIM = 8

MESSAGE = "Write the sbatch script for a 3-day TFT training run"
MATCH = ("GPU training is submitted with sbatch jobs/train_gpu.sh on the Slurm cluster; "
         "the script asks for one A100 and checkpoints after every epoch.")  # fmt: skip
CLUSTER = ("The Slurm cluster has 6 nodes with four A100 40 GB each; the gpu partition has "
           "a 24 hour limit, gpu-long 72 hours.")  # fmt: skip
ONE_NAME = "The Slurm accounting database is backed up nightly to the archive bucket."


def _unit(*parts: float) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[: len(parts)] = parts
    return vector / np.linalg.norm(vector)


def _candidate(content: str, relevance: float, vector: np.ndarray | None, *,
               kind: Kind = Kind.FACT, chunk: bool = False) -> Candidate:  # fmt: skip
    memory = Memory.new("ada", content, kind.default_memory_type, kind, now=NOW)
    memory = replace(memory, embedding=vector,
                     provenance=Provenance(turn_ids=("t1",) if chunk else ()))  # fmt: skip
    return Candidate(memory, relevance, 0.0, relevance)


#: The clear match's vector; the pool's second memory is ~0.61 similar to it.
MATCH_VECTOR = _unit(0.8, 0.6)
FILLER = [f"Filler memory {i} about invoices, retries and dashboards" for i in range(6)]


def _pool(cluster: str = CLUSTER, vector: np.ndarray | None = None, *, match: float = 1.0,
          chunk: bool = False) -> list[Candidate]:  # fmt: skip
    near = _unit(0.45, 0.6, 0.66) if vector is None else vector
    return [
        _candidate(MATCH, match, MATCH_VECTOR, kind=Kind.PATTERN),
        _candidate(cluster, 0.1, near, chunk=chunk),
        *(_candidate(text, 0.05, _unit(0.0, 0.0, 0.0, 1.0)) for text in FILLER),
    ]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def test_a_learning_the_clear_match_points_to_gets_the_chains_relevance() -> None:
    pool = _pool()
    near = pool[1].memory.embedding
    assert near is not None
    cosine = _cosine(MATCH_VECTOR, near)
    assert cosine >= MIN_COSINE
    out, pointed = with_pointed(pool, MESSAGE)
    by_id = {c.id: c for c in out}
    assert list(pointed) == [pool[1].id] and pointed[pool[1].id][0] == pool[0].id
    assert pointed[pool[1].id][1] == pytest.approx(cosine)
    assert by_id[pool[1].id].relevance == pytest.approx(1.0 * cosine)
    assert [c.id for c in out][:2] == [pool[0].id, pool[1].id]  # best relevance first
    assert all(by_id[c.id].relevance == c.relevance for c in pool[2:])  # nothing else moves


def test_the_chain_is_the_match_relevance_times_the_cosine_and_never_lowers() -> None:
    pool = _pool(match=0.95)
    near = pool[1].memory.embedding
    assert near is not None
    out, _ = with_pointed(pool, MESSAGE)
    assert {c.id: c.relevance for c in out}[pool[1].id] == pytest.approx(
        0.95 * _cosine(MATCH_VECTOR, near)
    )
    high = [pool[0], replace(pool[1], relevance=0.9), *pool[2:]]
    out, pointed = with_pointed(high, MESSAGE)
    assert pointed == {} and {c.id: c.relevance for c in out}[pool[1].id] == 0.9


def test_one_shared_name_is_not_a_link() -> None:
    assert with_pointed(_pool(ONE_NAME), MESSAGE)[1] == {}


def test_names_alone_without_a_similar_meaning_are_not_a_link() -> None:
    far = _unit(0.1, 0.0, 1.0)  # cosine with the match ~0.08
    assert _cosine(MATCH_VECTOR, far) < MIN_COSINE
    assert with_pointed(_pool(vector=far), MESSAGE)[1] == {}


def test_names_the_message_says_itself_are_not_a_link() -> None:
    # what the two share, the message says: the lexical side counts it already
    asked = "Write the sbatch script for one A100 GPU of the Slurm cluster"
    assert with_pointed(_pool(), asked)[1] == {}


def test_words_many_learnings_carry_are_not_names() -> None:
    common = [_candidate(f"The Slurm cluster note {i} with an A100 mention", 0.05,
                         _unit(0.0, 0.0, 0.0, 1.0)) for i in range(RARE_DF)]  # fmt: skip
    pool = [*_pool(), *common]
    # slurm, cluster and a100 are now carried by more than RARE_DF learnings
    assert sum("slurm" in terms_of(c.memory.content) for c in pool) > RARE_DF
    assert with_pointed(pool, MESSAGE)[1] == {}


def test_without_a_clear_match_or_for_conversation_chunks_nothing_moves() -> None:
    assert with_pointed(_pool(match=0.85), MESSAGE)[1] == {}
    assert with_pointed(_pool(chunk=True), MESSAGE)[1] == {}
    chunk_match = _pool()
    chunk_match[0] = replace(chunk_match[0], memory=replace(
        chunk_match[0].memory, provenance=Provenance(turn_ids=("t1",))))  # fmt: skip
    assert with_pointed(chunk_match, MESSAGE)[1] == {}


def test_short_tokens_are_not_names() -> None:
    assert terms_of("moved from W&B to MLflow") == {"move", "mlflow"}  # not "w", not "b"


def test_a_term_given_back_its_e_is_counted_in_every_learning_that_carries_it() -> None:
    # "staging" is the term "stage", not a prefix of the word: the probe drops its "e"
    carried = [(text, text.lower()) for text in ["Staging deploys run nightly"] * RARE_DF]
    assert terms_of(carried[0][0]) == {"stage", "deploy", "run", "nightly"}
    assert _uncommon("stage", carried)
    assert not _uncommon("stage", [*carried, ("The staging bucket", "the staging bucket")])


# -- through the engine: explain() shows the term, context() injects the memory ----------------


class VectorEmbedder:
    """Planned vectors for planned texts; any other text an axis of its own."""

    def __init__(self, vectors: Mapping[str, np.ndarray]) -> None:
        self._vectors = dict(vectors)
        self._axes: dict[str, int] = {}

    @property
    def model_id(self) -> str:
        return "vectors"

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            if text in self._vectors:
                out[row] = self._vectors[text]
            else:
                out[row, 4 + self._axes.setdefault(text, len(self._axes) % 4)] = 1.0
        return out


def test_explain_shows_the_pointed_term_and_context_injects_the_memory(tmp_path: Path) -> None:
    near = _unit(0.1, 0.9, 0.45)  # cosine 0.1 with the message, 0.61 with its clear match
    vectors = {MESSAGE: _unit(1.0), MATCH: MATCH_VECTOR, CLUSTER: near,
               ONE_NAME: _unit(0.1, 0.7, 0.5, 0.5)}  # fmt: skip
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(),
                    embedder=VectorEmbedder(vectors))  # fmt: skip
    match = engine.remember(MATCH, "ada", "pattern", now=NOW).memory_id or ""
    cluster = engine.remember(CLUSTER, "ada", "fact", now=NOW).memory_id or ""
    one = engine.remember(ONE_NAME, "ada", "fact", now=NOW).memory_id or ""
    for text in FILLER:
        engine.remember(text, "ada", "fact", now=NOW)
    gated = engine.explain(MESSAGE, "ada", now=NOW)
    assert gated.components[match]["calibrated_relevance"] >= 0.9
    pointed = gated.components[cluster]["pointed"]
    assert pointed == pytest.approx(_cosine(MATCH_VECTOR, near), abs=1e-3)
    assert gated.components[cluster]["calibrated_relevance"] == pytest.approx(pointed)
    assert "pointed" not in gated.components[one]  # one shared name: no chain
    assert any(s.startswith("pointed to: ") and cluster in s
               for s in gated.classification.signals)  # fmt: skip
    injected = {m.id for m in engine.context(MESSAGE, "ada", now=NOW).memories}
    assert cluster in injected and one not in injected
