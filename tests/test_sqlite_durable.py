"""What a SQLite write acknowledges survives a crash of the machine or its filesystem, not
only of the process (``base.lazy_commit``, ``SQLiteStore._transaction``): a memory written,
changed or forgotten, a key, any document but a context's record commits under
``synchronous=FULL``; use counts, context records, promotions, the embedding cache and the
derived indexes stay under ``NORMAL``, as on PostgreSQL (``synchronous_commit = off``).
Session 19 (h7): a filesystem remounted read-only by an I/O error lost acknowledged
memories committed under ``NORMAL`` (``bench/attacks/read_only_store.py``)."""

from __future__ import annotations

import threading
from pathlib import Path

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.store.sqlite import SQLiteStore

from .conftest import NOW, make_settings


def commits(store: SQLiteStore) -> list[str]:
    """Start recording, for each commit the calling thread makes on the store's connection,
    the ``synchronous`` mode it ran under (``FULL`` or ``NORMAL``). The mode is the last one
    set by any thread (the store's lock orders them); the checkpointer's thread's own
    commits (a restarted log begun, ``store/checkpoint.py``) are not the caller's."""
    modes: list[str] = []
    current = ["NORMAL"]
    caller = threading.get_ident()

    def seen(statement: str) -> None:
        text = statement.strip().upper()
        if text.startswith("PRAGMA SYNCHRONOUS="):
            current[0] = text.split("=", 1)[1]
        elif text == "COMMIT" and threading.get_ident() == caller:
            modes.append(current[0])

    store._db.set_trace_callback(seen)
    return modes


def test_memories_commit_durably_and_a_contexts_counts_do_not(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db", defer_uses=False)  # the counts in the call
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    engine.remember("the kayak is in the blue shed", user_id="u", now=NOW)
    modes = commits(store)
    kayak = engine.remember("the canoe is in the red shed", user_id="u", now=NOW)
    assert modes[-1] == "FULL"  # (the embedding cache before it may be NORMAL)
    del modes[:]
    engine.context("where is the canoe?", user_id="u", now=NOW)
    assert modes == ["NORMAL"]  # the counted uses and the context's record
    del modes[:]
    engine.pin(str(kayak.memory_id), "u")
    engine.forget(str(kayak.memory_id), "u")
    assert modes == ["FULL", "FULL"]
    del modes[:]
    engine.ingest_conversation([{"speaker": "user", "text": "my cat is called Miso"}], "u")
    assert modes and modes[-1] == "FULL"
    engine.close()


def test_a_contexts_record_and_its_counts_written_after_it_commit_lazily(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.db")  # the default: the counts after the call
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    kayak = engine.remember("the kayak is in the blue shed", user_id="u", now=NOW)
    # each commit that wrote the context's record or counted uses, by whichever thread: the
    # counts are committed by the first thread to take the store's lock after the call
    written: list[tuple[str, str]] = []
    current, wrote = ["NORMAL"], [""]

    def seen(statement: str) -> None:
        text = statement.strip().upper()
        if text.startswith("PRAGMA SYNCHRONOUS="):
            current[0] = text.split("=", 1)[1]
        elif text.startswith("INSERT OR REPLACE INTO STATE"):
            wrote[0] = "record"
        elif text.startswith("UPDATE USES SET ACCESS_COUNT"):
            wrote[0] = "counts"
        elif text == "COMMIT" and wrote[0]:
            written.append((wrote[0], current[0]))
            wrote[0] = ""

    store._db.set_trace_callback(seen)
    assert engine.context("where is the kayak?", user_id="u", now=NOW).memories
    # the store's next statement comes after the counts (committed by its thread, or now)
    assert [m.access_count for m in store.get("u", [str(kayak.memory_id)])] == [1]
    store._db.set_trace_callback(None)
    assert written == [("record", "NORMAL"), ("counts", "NORMAL")]
    engine.close()


def test_a_promotion_alone_commits_lazily_as_on_postgresql(tmp_path: Path) -> None:
    from engrain.store import Patch

    store = SQLiteStore(tmp_path / "store.db")
    engine = Engine(settings=make_settings(tmp_path), store=store, embedder=HashEmbedder())
    memory = engine.remember("the kayak is in the blue shed", user_id="u", now=NOW)
    modes = commits(store)
    store.write(patches=[Patch("u", str(memory.memory_id), {"promoted_at": NOW})])
    store.write(patches=[Patch("u", str(memory.memory_id), {"pinned": True})])
    assert modes == ["NORMAL", "FULL"]
    engine.close()
