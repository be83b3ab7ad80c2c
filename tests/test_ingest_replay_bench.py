"""``bench/ingest_throughput.py --replay``: the vectors a recorded run gave each text come
back unchanged, an engine fed them stores what it stores with the embedder they came from,
and a text that was not recorded is refused."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.store import MemoryFilter, MemoryStore

from .conftest import NOW, make_settings

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import ingest_throughput as it  # noqa: E402

TURNS = [{"speaker": "Caroline", "text": f"I went to the lake on day {i} and painted it."}
         for i in range(12)]  # fmt: skip


def _stored(engine: Engine) -> list[tuple[str, bytes]]:
    rows = engine.store.query("u", MemoryFilter(), limit=None)
    return sorted((m.content, b"" if m.embedding is None else m.embedding.tobytes()) for m in rows)


def test_replayed_vectors_store_what_the_recorded_run_stored(tmp_path: Path) -> None:
    inner = HashEmbedder()
    recorder = it.RecordingEmbedder(inner)  # type: ignore[arg-type]
    with Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=recorder) as a:
        a.ingest_conversation(TURNS, "u", "s1", now=NOW)
        recorded = _stored(a)
    path = tmp_path / "vectors.npz"
    it.save_vectors(recorder, path)
    replay = it.ReplayEmbedder(path)
    texts = list(dict.fromkeys(recorder.texts))
    assert np.array_equal(replay.embed(texts), inner.embed(texts))
    with Engine(settings=make_settings(tmp_path), store=MemoryStore(), embedder=replay) as b:  # type: ignore[arg-type]
        b.ingest_conversation(TURNS, "u", "s1", now=NOW)
        assert _stored(b) == recorded
    assert replay.texts_embedded == len(recorder.texts) + len(texts)
    with pytest.raises(KeyError, match="not recorded"):
        replay.embed(["a text no run gave the model"])


def test_the_wal_watch_counts_the_calling_thread_s_writes_only(tmp_path: Path) -> None:
    import threading

    from engrain.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "w.db")
    with Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder()) as e:
        watch = it.WalWatch(e.store)
        e.ingest_conversation(TURNS, "u", "s1", now=NOW)
        other = threading.Thread(target=e.ingest_conversation, args=(TURNS, "v", "s1"),
                                 kwargs={"now": NOW})  # fmt: skip
        other.start()
        other.join()
        summary = watch.summary()
    assert summary["writes"] == 1  # the other thread's call is not the caller's
    assert summary["extended_the_log"] in (0, 1)  # of that one write
    assert summary["largest_log_mb"] > 0
    assert summary["write_wall_seconds"] >= summary["write_thread_cpu_seconds"] > 0
