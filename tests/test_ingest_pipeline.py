"""``bench/ingest_throughput.ingest_pipelined``, the prototype of a proposed
``Engine.ingest_conversations`` (issue 18): the next session is embedded while this one is
planned and written, and what is stored is what one ``ingest_conversation`` per session
stores; a session whose embedding fails writes nothing of itself."""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.embed.base import Matrix
from engrain.errors import EmbeddingError
from engrain.model import Turn
from engrain.store import MemoryFilter, MemoryStore

from .conftest import NOW, make_settings

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import ingest_throughput  # type: ignore[import-not-found]  # noqa: E402


def _sessions(count: int) -> list[tuple[list[Turn], str, str, datetime]]:
    rng = random.Random(count)
    said = ["I moved to Lisbon in 2021", "my sister Ana is a nurse", "I prefer tea to coffee",
            "we ran the Berlin marathon", "the garden needs water", "see you Friday"]  # fmt: skip
    sessions = []
    for s in range(count):
        turns = [Turn(("ada", "bob")[i % 2], f"{rng.choice(said)} (s{s}, t{i})", f"D{s}:{i}")
                 for i in range(rng.randint(1, 12))]  # fmt: skip
        restated = [Turn("ada", "I moved to Lisbon in 2021 and I love the light there")]
        sessions.append((turns + restated, f"u{s % 3}", f"session_{s}", NOW))
    return sessions


def _stored(store: MemoryStore) -> list[tuple[object, ...]]:
    rows = []
    for user in ("u0", "u1", "u2"):
        for m in store.query(user, MemoryFilter(), limit=1000):
            assert m.embedding is not None
            rows.append((m.user_id, m.session_id, m.content, m.importance, m.memory_type,
                         m.provenance.turn_ids, m.embedding.tobytes()))  # fmt: skip
    return sorted(rows, key=repr)


def test_the_pipeline_stores_what_calls_per_session_store(tmp_path: Path) -> None:
    sessions = _sessions(9)
    serial_store, piped_store = MemoryStore(), MemoryStore()
    serial = Engine(settings=make_settings(tmp_path, min_chunk_tokens=0), store=serial_store,
                    embedder=HashEmbedder())  # fmt: skip
    expected = [serial.ingest_conversation(t, u, s, now=n) for t, u, s, n in sessions]
    piped = Engine(settings=make_settings(tmp_path, min_chunk_tokens=0), store=piped_store,
                   embedder=HashEmbedder())  # fmt: skip
    reports = ingest_throughput.ingest_pipelined(piped, sessions)
    assert [[(o.action, o.content, o.importance) for o in r.outcomes] for r in reports] == [
        [(o.action, o.content, o.importance) for o in r.outcomes] for r in expected
    ]
    assert any(o.action == "merged" for r in reports for o in r.outcomes)  # dedup across calls
    assert _stored(piped_store) == _stored(serial_store)


class _FailsOn(HashEmbedder):
    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    def embed(self, texts: Sequence[str]) -> Matrix:
        if any(self.word in t for t in texts):
            raise EmbeddingError("the model failed")
        return super().embed(texts)


def test_a_failed_session_writes_nothing_of_itself(tmp_path: Path) -> None:
    sessions = _sessions(5)
    sessions[3] = ([Turn("ada", "poison pill"), *sessions[3][0]], *sessions[3][1:])
    store = MemoryStore()
    engine = Engine(settings=make_settings(tmp_path, min_chunk_tokens=0), store=store,
                    embedder=_FailsOn("poison"))  # fmt: skip
    with pytest.raises(EmbeddingError):
        ingest_throughput.ingest_pipelined(engine, sessions)
    written = {m.session_id for u in ("u0", "u1", "u2")
               for m in store.query(u, MemoryFilter(), limit=1000)}  # fmt: skip
    assert written == {"session_0", "session_1", "session_2"}  # the ones before, whole
