"""Dedup's Dice on bigram bits (issue 18, session 12): one AND and a popcount per pair give
the same shared-bigram counts, scores and winners as the bigram sets, also when the bit
table is full and under threads that meet new bigrams at once."""

from __future__ import annotations

import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from engrain.ingest import dedup
from engrain.ingest.dedup import _shared, best_duplicate, bigram_bits, bigrams, dice_coefficient
from engrain.model import Kind, Memory, MemoryType

from .conftest import NOW

ALPHABET = "abcdefghij klmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:'-éüßж漢字"


def _text(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(size))


def _sets_shared(a: str, b: str) -> int:
    return len(bigrams(a) & bigrams(b))


@pytest.fixture
def fresh_table(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty bit table (and no cached bits) for the test, the process's own after it."""
    monkeypatch.setattr(dedup, "_SLOTS", {})
    bigram_bits.cache_clear()
    yield
    bigram_bits.cache_clear()


def test_bits_count_the_shared_bigrams_exactly(fresh_table: None) -> None:
    rng = random.Random(12)
    texts = [_text(rng, rng.randint(0, 120)) for _ in range(150)]
    texts += ["Caroline: I went to the support group", "caroline:  i WENT to the support group"]
    for a in texts[:60]:
        for b in texts:
            assert _shared(a, b) == _sets_shared(a, b), (a, b)
    bits = bigram_bits(texts[-1])
    assert bits is not None and bits[1] == len(bigrams(texts[-1])) == bits[0].bit_count()


def test_a_full_table_falls_back_to_the_sets(
    fresh_table: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dedup, "BIT_SLOTS", 40)
    rng = random.Random(5)
    texts = [_text(rng, 30) for _ in range(30)]
    assert any(bigram_bits(t) is None for t in texts)  # the table filled up
    assert any(bigram_bits(t) is not None for t in texts)  # the first texts got bits
    assert len(dedup._SLOTS) <= 40
    for a in texts:
        for b in texts:
            assert _shared(a, b) == _sets_shared(a, b)


def test_threads_meeting_new_bigrams_never_share_a_bit(fresh_table: None) -> None:
    rng = random.Random(7)
    texts = [_text(rng, 80) for _ in range(400)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(bigram_bits, texts))
    slots = list(dedup._SLOTS.values())
    assert len(slots) == len(set(slots))  # one bit per bigram
    for a, b in zip(texts, reversed(texts), strict=True):
        assert _shared(a, b) == _sets_shared(a, b)


def _memory(key: str, content: str) -> Memory:
    return Memory(id=key, user_id="u", content=content, memory_type=MemoryType.EPISODIC,
                  kind=Kind.EVENT, created_at=NOW, updated_at=NOW)  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_best_duplicate_picks_what_the_sets_pick(seed: int) -> None:
    rng = random.Random(seed)
    words = ["port", "8033", "service", "runs", "on", "the", "blue", "server", "Caroline",
             "Melanie", "painted", "a", "lake", "sunrise", "yesterday"]  # fmt: skip
    base = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(40)]
    pool = [_memory(f"m{i}", t) for i, t in enumerate(base)]
    for text in base[:20] + [t + " again" for t in base[:20]]:
        for threshold in (0.5, 0.8):
            expected, best = None, threshold
            for memory in pool:  # the reference: Dice from the sets, first of the best
                score = dice_coefficient(text, memory.content)
                if score > best and dedup.same_subject(memory.content, text):
                    expected, best = memory, score
            assert best_duplicate(text, pool, threshold) is expected


@pytest.mark.skipif(not hasattr(dedup.os, "fork"), reason="POSIX fork")
def test_a_child_forked_while_the_table_is_locked_can_still_add_bigrams() -> None:
    import os
    import signal
    import uuid

    text = f"a text the child meets first: {uuid.uuid4()}"
    with dedup._SLOTS_LOCK:  # as if another thread were adding bigrams at the fork
        pid = os.fork()
        if pid == 0:  # the child: its own lock, so a new text does not wait forever
            signal.alarm(10)  # waiting on the parent's lock would end the child here
            try:
                bits = bigram_bits(text)
                os._exit(0 if bits is not None or len(dedup._SLOTS) >= dedup.BIT_SLOTS else 1)
            except BaseException:
                os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
