"""A held graph read in place from its file, and the file changed in place by someone else
(session 26's attack, ``bench/attacks/derived_files.py``): the graph's pages are the file's,
so a process walking it as it now is faulted (flipped bytes: SIGSEGV in usearch's walk; a
file cut short: SIGBUS). Now such a view is never read again once its file's length or
modification time moved (``graph_file.unchanged``): the search is served by SQL, the graph
dropped and loaded again; and a graph file that is a pipe, a device or a directory is not
opened (opening a pipe for reading waited for a writer forever)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.errors import StoreError
from engrain.store.base import ALL

from .test_pg_graph_file import (
    _file,
    _files,
    _graph_store,
    _kept_by_one_process,
    _loaded,
    _sql_store,
)
from .test_pg_projected import _corpus, _low_rank, _same

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
held_graph = postgres.held_graph


@pytest.fixture(autouse=True)
def _small_users_get_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests' users are small: hold their graphs all the same."""
    monkeypatch.setattr(held_graph, "MIN_ROWS", 1)


def _rewritten_in_place(path: Path, flip: bool = False) -> None:
    """``path`` written again in place (same inode, as ``cp`` or an editor's save does),
    with one byte of its graph flipped if ``flip``. Its pages change under any process
    mapping it, and its modification time moves."""
    data = bytearray(path.read_bytes())
    if flip:
        data[len(data) // 2] ^= 0x40
    stamp = path.stat().st_mtime_ns
    with path.open("r+b") as out:
        out.write(bytes(data))
    os.utime(path, ns=(stamp + 1_000_000, stamp + 1_000_000))  # a coarse clock: moved all the same


def test_a_view_of_a_file_changed_in_place_is_never_read(pg_url: str, tmp_path: Path) -> None:
    vectors = _low_rank(400, seed=31)
    _kept_by_one_process(pg_url, tmp_path, vectors)
    reader = _sql_store(pg_url)
    try:
        kept = _files(reader, tmp_path).read("alice")
        assert kept is not None and kept.index.is_view and kept.index.intact
        _rewritten_in_place(_file(tmp_path), flip=True)
        assert not kept.index.intact
        unit = np.asarray(vectors[5], dtype=np.float32)
        with pytest.raises(StoreError, match="changed in place"):
            kept.index.search(unit, 5)
        keys = np.asarray([1, 2], dtype=np.uint64)
        with pytest.raises(StoreError, match="changed in place"):
            kept.index.patch(keys, np.stack([unit, unit]))  # never copied in, nor saved
        assert kept.index.is_view
    finally:
        reader.close()


def test_a_served_graph_whose_file_changed_in_place_is_dropped_and_loaded_again(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no pause between a user's loads (by default four times the last one's length)
    monkeypatch.setattr(postgres.projected, "_pause", lambda took, held: 0.0)
    vectors = _low_rank(600, seed=32)
    store = _graph_store(pg_url, tmp_path)
    truth = _sql_store(pg_url, exact_search_below=10**9)
    try:
        store.write(_corpus(vectors))
        held = _loaded(store)
        graph = held.held("alice")
        assert graph.index.is_view  # the file it wrote, read in place
        # the same bytes written again in place: no fault whatever the code, but the view
        # can no longer be vouched for
        _rewritten_in_place(_file(tmp_path))
        query = vectors[40]
        _same(store.search("alice", query, 8, ALL), truth.search("alice", query, 8, ALL))
        assert held.held("alice") is not graph  # dropped at that search
        assert store.wait_for_projection("alice", timeout=60)
        again = held.held("alice")
        assert again is not None and again is not graph and again.index.intact
        assert held.graphs["from_file"] + held.graphs["built"] == 2  # loaded once more
        _same(store.search("alice", query, 8, ALL), truth.search("alice", query, 8, ALL))
        assert held.calls["served"] >= 1
    finally:
        store.close()
        truth.close()


@pytest.mark.parametrize("thing", ["pipe", "directory", "device"])
def test_a_graph_file_that_is_no_regular_file_is_not_opened(
    pg_url: str, tmp_path: Path, thing: str
) -> None:
    vectors = _low_rank(300, seed=33)
    _kept_by_one_process(pg_url, tmp_path, vectors)
    path = _file(tmp_path)
    path.unlink()
    if thing == "pipe":
        os.mkfifo(path)
    elif thing == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    reader = _sql_store(pg_url)
    try:
        files = _files(reader, tmp_path)
        read: list[Any] = []
        worker = threading.Thread(target=lambda: read.append(files.read("alice")), daemon=True)
        worker.start()
        worker.join(timeout=30)  # a pipe's open waited for a writer forever
        assert read == [None]
    finally:
        reader.close()
