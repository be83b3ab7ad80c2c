"""Session 8's ingest speed-ups (issue 18) change no result: the workers take the costliest
model runs first, dedup compares against one stacked matrix per call with Dice computed
inline, and a conversation's text-only work runs while the model embeds it."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engrain import Engine
from engrain.corrections import same_subject
from engrain.embed import HashEmbedder
from engrain.embed.base import Matrix
from engrain.embed.minilm import longest_first, split_sorted
from engrain.errors import EmbeddingError
from engrain.ingest import importance as imp
from engrain.ingest.dedup import (
    PREFILTER_COSINE,
    Recent,
    _close,
    best_duplicate,
    dice_coefficient,
    find_duplicate,
    partition,
)
from engrain.ingest.plan import Planner
from engrain.model import Kind, Memory, MemoryType, Turn
from engrain.store import MemoryFilter, MemoryStore

from .conftest import NOW, make_settings

# -- the order the model's workers take a call's runs ------------------------------------


def test_the_costliest_runs_go_first_and_none_is_lost() -> None:
    lengths = [12, 80, 30, 150, 30, 7]
    groups = [[5], [0], [2], [4], [1], [3]]  # one text a run, ascending (the int8 graph)
    assert longest_first(groups, lengths) == [[3], [1], [2], [4], [0], [5]]  # ties: stable
    padded = [[0, 5], [2, 4], [1], [3]]  # rows × padded length: 24, 60, 80, 150
    assert longest_first(padded, lengths) == [[3], [1], [2, 4], [0, 5]]


@pytest.mark.parametrize("count", [2, 9, 33])
def test_longest_first_is_a_permutation_of_the_split(count: int) -> None:
    rng = random.Random(count)
    lengths = [rng.randint(3, 256) for _ in range(count)]
    order = sorted(range(count), key=lengths.__getitem__)
    for batch in (1, 2, 32):
        groups = split_sorted(order, lengths, 2, batch)
        ordered = longest_first(groups, lengths)
        assert sorted(map(tuple, ordered)) == sorted(map(tuple, groups))
        costs = [len(g) * max(lengths[i] for i in g) for g in ordered]
        assert costs == sorted(costs, reverse=True)


# -- dedup: the same candidates, the same winner -----------------------------------------


def _memory(key: str, content: str, embedding: np.ndarray | None) -> Memory:
    memory = Memory(
        id=key, user_id="u", content=content, memory_type=MemoryType.EPISODIC,
        kind=Kind.EVENT, created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    return replace(memory, embedding=embedding)


def _reference(text: str, pool: Sequence[Memory], threshold: float) -> Memory | None:
    """find_duplicate as it was before session 8: dice_coefficient per pair."""
    best, best_score = None, threshold
    for memory in pool:
        score = dice_coefficient(text, memory.content)
        if score > best_score and same_subject(memory.content, text):
            best, best_score = memory, score
    return best


def _pool(seed: int) -> tuple[list[Memory], list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    words = ["ada", "moved", "to", "lisbon", "in", "spring", "her", "sister", "nurse", "the",
             "marathon", "plan", "march", "garden", "tomatoes", "works", "nights"]  # fmt: skip
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 9)))) for _ in range(60)]
    vectors = rng.normal(size=(60, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    memories = [_memory(f"m{i}", t, vectors[i] if i % 7 else None) for i, t in enumerate(texts)]
    memories.append(_memory("wide", texts[3], np.ones(4, dtype=np.float32) / 2))  # another size
    return memories, texts, vectors


@pytest.mark.parametrize("seed", range(6))
def test_inline_dice_picks_what_the_pairwise_coefficient_picks(seed: int) -> None:
    memories, texts, _ = _pool(seed)
    for threshold in (0.5, 0.8):
        for text in [*texts[:20], "ada moved to lisbon in spring", ""]:
            assert best_duplicate(text, memories, threshold) is _reference(
                text, memories, threshold
            )


@pytest.mark.parametrize("seed", range(4))
def test_the_stacked_recent_pool_keeps_the_prefilter_and_its_order(seed: int) -> None:
    memories, texts, vectors = _pool(seed)
    recent = Recent(memories)
    for row in range(0, 60, 5):
        query = vectors[row]
        near, bare = recent.partition(query)
        assert near + bare == _close(list(memories), query)
        assert all(float(m.embedding @ query) >= PREFILTER_COSINE for m in near)
        assert [m.id for m in bare] == [m.id for m in memories if m.embedding is None]
        assert partition(memories, query) == (near, bare)
        expected = find_duplicate(texts[row], memories, 0.5, query)
        assert best_duplicate(texts[row], near + bare, 0.5) is expected
    assert Recent([]).partition(vectors[0]) == ([], [])


def test_conversation_dedup_merges_a_restated_turn_across_calls(tmp_path: Path) -> None:
    engine = Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=HashEmbedder())
    said = "ada: I moved to Lisbon last spring and I love the light there, it is so warm"
    first = engine.ingest_conversation([Turn("ada", said[5:])], "u", "s1", now=NOW)
    again = engine.ingest_conversation([Turn("ada", said[5:] + "!")], "u", "s2", now=NOW)
    assert [o.action for o in first.outcomes] == ["stored"]
    assert [o.action for o in again.outcomes] == ["merged"]
    assert again.outcomes[0].memory_id == first.outcomes[0].memory_id


# -- a conversation's text-only work while the model runs --------------------------------


class _Recording(HashEmbedder):
    """The hash embedder, recording the thread of each call and failing on demand."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.threads: list[str] = []

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.threads.append(threading.current_thread().name)
        if self.fail:
            raise EmbeddingError("the model failed")
        return super().embed(texts)


def _turns(count: int, seed: int = 0) -> list[Turn]:
    rng = random.Random(seed)
    said = ["I moved to Lisbon in 2021", "my sister Ana is a nurse", "I prefer tea over coffee",
            "we ran the Berlin marathon", "the garden needs water", "see you Friday"]  # fmt: skip
    speakers = ("ada", "bob")
    return [Turn(speakers[i % 2], f"{rng.choice(said)} ({i})", f"D{i}") for i in range(count)]


def test_drafts_hold_the_vectors_and_salience_of_a_serial_planning(tmp_path: Path) -> None:
    embedder = _Recording()
    planner = Planner(MemoryStore(), embedder, make_settings(tmp_path, min_chunk_tokens=0))
    turns = _turns(12)
    drafts = planner.conversation_drafts(turns)
    assert len(drafts) > 1 and embedder.threads[0].startswith("engrain-embed")
    expected = HashEmbedder().embed([d.text for d in drafts])
    assert np.array_equal(np.vstack([d.vector for d in drafts]), expected)
    for draft in drafts:
        assert draft.salience == imp.salience(draft.text, draft.speakers)
    one = planner.conversation_drafts(turns[:1])  # one chunk: embedded on the calling thread
    assert embedder.threads[-1] == threading.current_thread().name and one[0].salience


def test_a_failed_embedding_raises_and_writes_nothing(tmp_path: Path) -> None:
    store = MemoryStore()
    engine = Engine(settings=make_settings(tmp_path, min_chunk_tokens=0), store=store,
                    embedder=_Recording(fail=True))  # fmt: skip
    with pytest.raises(EmbeddingError, match="the model failed"):
        engine.ingest_conversation(_turns(10), "u", "s1", now=NOW)
    assert store.count("u", MemoryFilter()) == 0


def test_concurrent_conversations_each_get_their_own_vectors(tmp_path: Path) -> None:
    store = MemoryStore()
    engine = Engine(settings=make_settings(tmp_path, min_chunk_tokens=0), store=store,
                    embedder=HashEmbedder())  # fmt: skip

    def feed(user: int) -> None:
        engine.ingest_conversation(_turns(9, seed=user), f"u{user}", "s", now=NOW)

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(feed, range(12)))
    hashed = HashEmbedder()
    for user in range(12):
        stored = store.query(f"u{user}", MemoryFilter(), limit=100)
        assert stored
        for memory in stored:
            assert memory.embedding is not None
            assert np.array_equal(memory.embedding, hashed.embed([memory.content])[0])
