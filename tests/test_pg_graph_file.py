"""A large PostgreSQL user's held pool graph kept in a file between processes
(``store/postgres/graph_file.py``, ``held_graph.restored``; issue 18, session 21).

A process that built a user's graph keeps it in a file; the next one reads it, checks it
against the database and catches it up, instead of building one. What must hold: a graph
read from a file never returns a forgotten memory nor misses a committed one (another
process writing in between), and a file that is damaged or not this table's and user's,
or that does not hold the user's rows, is never used: the graph is built instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.store.base import ALL, Patch

from .test_pg_projected import VISIBLE, _corpus, _low_rank, _same, _seqs, _unit
from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
held_graph = postgres.held_graph
graph_file = pytest.importorskip("engrain.store.postgres.graph_file")
PostgresStore = postgres.PostgresStore


@pytest.fixture(autouse=True)
def _small_users_get_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests' users are small: hold their graphs all the same."""
    monkeypatch.setattr(held_graph, "MIN_ROWS", 1)


def _graph_store(url: str, directory: Path | None) -> Any:
    """A "process" holding every user's pool as a graph, kept in ``directory``."""
    return PostgresStore(
        url, pool_size=3, exact_search_below=1, indexed_share=0.0, learnings_bytes=0,
        projected_bytes=2**26, pool_index="graph", graph_dir=directory,
    )  # fmt: skip


def _sql_store(url: str, **options: Any) -> Any:
    return PostgresStore(url, pool_size=2, learnings_bytes=0, projected_bytes=0, **options)


def _loaded(store: Any, user: str = "alice") -> Any:
    """The user's graph, loaded (the first pool search walks the database's and starts it)."""
    store.search(user, np.ones(postgres.INDEXED_DIM, dtype=np.float32), 1, ALL)
    assert store.wait_for_projection(user, timeout=60)
    return store._projected


def _files(store: Any, directory: Path) -> Any:
    """The graph files of the table ``store`` reads, in ``directory``."""
    with store._connection() as conn:
        files = graph_file.GraphFiles.of(conn, directory)
    assert files is not None
    return files


def _file(directory: Path) -> Path:
    (found,) = directory.glob("*.graph")
    return found


def test_a_graph_read_from_a_file_sees_every_write_made_since(pg_url: str, tmp_path: Path) -> None:
    vectors = _low_rank(900, seed=11)
    first = _graph_store(pg_url, tmp_path)
    other = _sql_store(pg_url, exact_search_below=1, indexed_share=0.0)
    truth = _sql_store(pg_url, exact_search_below=10**9)
    stores = [first, other, truth]
    try:
        first.write(_corpus(vectors))
        held = _loaded(first)
        assert held.graphs == {"from_file": 0, "built": 1}
        built = held.held("alice")
        assert _file(tmp_path).stat().st_size > 900 * postgres.INDEXED_DIM
        assert built.index.is_view  # the file it wrote, read in place: its own copy dropped
        first.close()  # the process ends
        # another process writes in between: forgets the nearest memory to the query, adds
        # two nearer than all, moves a far one onto it, and mutes the second nearest
        query = vectors[77]
        nearest = truth.search("alice", query, 2, ALL)
        far = min(range(900), key=lambda i: float(vectors[i] @ query))
        other.write(deletes=[nearest[0][0]])
        other.write([mem(f"near-{i}", "alice", vector=_unit(query + 0.01 * (i + 1)))
                     for i in range(2)] + [mem(f"m-{far:05d}", "alice", minutes=far,
                     vector=_unit(query + 0.004))])  # fmt: skip
        other.write(patches=[Patch("alice", nearest[1][0].id, {"muted": True})])
        second = _graph_store(pg_url, tmp_path)
        stores.append(second)
        again = _loaded(second)
        assert again.graphs == {"from_file": 1, "built": 0}  # read, not built
        graph = again.held("alice")
        assert graph.revision > built.revision and graph.dead == 1
        assert len(graph.index) == 902  # 900 read, 2 new; the moved one replaced in place
        assert graph.index.is_view  # patched in its own copy, kept, then read in place
        # the graph itself proposes the new and the moved rows: none is missed
        found = set(graph.candidates(query, 3).tolist())
        assert set(_seqs(truth, ["near-0", "near-1", f"m-{far:05d}"])) <= found
        for k, flt in ((5, ALL), (5, VISIBLE), (20, VISIBLE)):
            mine = second.search("alice", query, k, flt)
            _same(mine, truth.search("alice", query, k, flt))
            ids = [m.id for m, _ in mine]
            assert nearest[0][0].id not in ids  # forgotten: never returned
            assert {"near-0", "near-1", f"m-{far:05d}"} <= set(ids)
        assert nearest[1][0].id not in [m.id for m, _ in second.search("alice", query, 5, VISIBLE)]
        assert again.calls["by_sql"] == 0
        # it kept the caught-up copy for the next process
        assert _files(second, tmp_path).read("alice").revision == graph.revision
    finally:
        for store in stores:
            store.close()


def _kept_by_one_process(url: str, directory: Path, vectors: list[Any]) -> None:
    """The user's rows written, and a graph built and kept in ``directory`` by a process
    that then ends."""
    store = _graph_store(url, directory)
    store.write(_corpus(vectors))
    _loaded(store)
    store.close()


def _built_again(url: str, directory: Path, truth: Any, query: Any) -> None:
    """A new process does not use the file: it builds, serves right, and keeps its own."""
    store = _graph_store(url, directory)
    try:
        held = _loaded(store)
        assert held.graphs == {"from_file": 0, "built": 1}
        _same(store.search("alice", query, 8, ALL), truth.search("alice", query, 8, ALL))
    finally:
        store.close()
    again = _graph_store(url, directory)
    try:
        assert _loaded(again).graphs == {"from_file": 1, "built": 0}  # the new file is used
    finally:
        again.close()


@pytest.mark.parametrize("damage", ["byte", "torn", "head", "empty"])
def test_a_damaged_file_is_ignored_and_replaced(pg_url: str, tmp_path: Path, damage: str) -> None:
    vectors = _low_rank(500, seed=12)
    _kept_by_one_process(pg_url, tmp_path, vectors)
    path = _file(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "byte":
        data[len(data) // 2] ^= 0x40  # inside the graph: its CRC no longer matches
    elif damage == "torn":
        data = data[: len(data) - 1000]
    elif damage == "head":
        data[20] ^= 0x01  # the revision: the head's CRC no longer matches
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    truth = _sql_store(pg_url, exact_search_below=10**9)
    try:
        _built_again(pg_url, tmp_path, truth, vectors[3])
    finally:
        truth.close()


def test_another_tables_or_users_file_is_not_read(pg_server: str, tmp_path: Path) -> None:
    from .pg import new_schema

    vectors = _low_rank(400, seed=13)
    one, two = new_schema(pg_server), new_schema(pg_server)
    _kept_by_one_process(one, tmp_path, vectors)
    # the same user and rows in another schema of the same database: another table
    other = _graph_store(two, tmp_path)
    try:
        other.write(_corpus(vectors))
        files = _files(other, tmp_path)
        (theirs,) = tmp_path.glob("*.graph")
        assert files.path("alice") != theirs
        theirs.rename(files.path("alice"))  # their file where this table's would be
        assert files.read("alice") is None  # its head names the other table
        files.path("alice").rename(files.path("bob"))
        assert files.read("bob") is None  # nor is it bob's
        held = _loaded(other)
        assert held.graphs == {"from_file": 0, "built": 1}
    finally:
        other.close()


@pytest.mark.parametrize("wrong", ["missing rows", "other vectors", "newer revision"])
def test_a_file_that_does_not_hold_the_users_rows_is_not_used(
    pg_url: str, tmp_path: Path, wrong: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engrain.store.ann import VectorIndex

    monkeypatch.setattr(held_graph, "CHECKED_ROWS", 2)  # the first and last rows' vectors

    vectors = _low_rank(600, seed=14)
    _kept_by_one_process(pg_url, tmp_path, vectors)
    truth = _sql_store(pg_url, exact_search_below=10**9)
    try:
        seqs = np.asarray(_seqs(truth, [f"m-{i:05d}" for i in range(600)]), dtype=np.uint64)
        files = _files(truth, tmp_path)
        kept = files.read("alice")
        assert kept is not None
        rows = np.asarray(vectors, dtype=np.float32)
        revision = kept.revision
        if wrong == "missing rows":  # a well-formed file that lacks a committed row
            keys, rows = np.delete(seqs, 300), np.delete(rows, 300, axis=0)
        elif wrong == "other vectors":  # every row, each with another row's vector
            keys, rows = seqs, np.roll(rows, 1, axis=0)
        else:  # the user's rows, but a revision the database has not reached
            keys, revision = seqs, revision + 10
        files.write("alice", revision, VectorIndex.build(keys, rows))
        assert files.read("alice") is not None  # whole and this table's: read, then checked
        _built_again(pg_url, tmp_path, truth, vectors[9])
    finally:
        truth.close()


def test_where_graphs_are_kept() -> None:
    home = graph_file.graph_dir({"XDG_CACHE_HOME": "/var/cache/me"})
    assert home == Path("/var/cache/me/engrain/pg-graphs")
    assert graph_file.graph_dir({}) == Path.home() / ".cache" / "engrain" / "pg-graphs"
    assert graph_file.graph_dir({"ENGRAIN_PG_GRAPH_DIR": "/srv/graphs"}) == Path("/srv/graphs")
    for off in ("off", "OFF", "no", "false", "none"):
        assert graph_file.graph_dir({"ENGRAIN_PG_GRAPH_DIR": off}) is None
    assert graph_file.graph_dir({"XDG_CACHE_HOME": "relative/cache"}) is None  # nobody's


#: Another process: forgets one memory of alice's and writes a new one with the given vector.
ANOTHER_PROCESS = """
import dataclasses, json, sys
import numpy as np
from engrain.store.postgres import PostgresStore
url, gone, vector = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = PostgresStore(url, pool_size=1, learnings_bytes=0, projected_bytes=0,
                      fill_in_background=False)
try:
    [old] = store.get("alice", [gone])
    new = dataclasses.replace(old, id="from-another-process",
                              embedding=np.asarray(vector, dtype=np.float32))
    store.write([new], deletes=[old])
finally:
    store.close()
"""


def test_a_write_by_another_process_between_two_processes_is_seen(
    pg_url: str, tmp_path: Path
) -> None:
    import json
    import os
    import subprocess
    import sys

    vectors = _low_rank(500, seed=15)
    _kept_by_one_process(pg_url, tmp_path, vectors)
    query = vectors[250]
    near = _unit(query + 0.002)
    src = str(Path(__file__).resolve().parents[1] / "src")  # this tree's engrain
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    subprocess.run(
        [sys.executable, "-c", ANOTHER_PROCESS, pg_url, "m-00250", json.dumps(near.tolist())],
        check=True, timeout=300, env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    truth = _sql_store(pg_url, exact_search_below=10**9)
    reader = _graph_store(pg_url, tmp_path)
    try:
        held = _loaded(reader)
        assert held.graphs == {"from_file": 1, "built": 0}
        ids = [m.id for m, _ in reader.search("alice", query, 5, ALL)]
        assert ids[0] == "from-another-process" and "m-00250" not in ids
        _same(reader.search("alice", query, 5, ALL), truth.search("alice", query, 5, ALL))
        assert held.held("alice").dead == 1
    finally:
        reader.close()
        truth.close()


def test_a_load_reads_the_users_rows_on_one_core_of_the_database(
    pg_url: str, tmp_path: Path
) -> None:
    """A load is background work beside the first calls: every statement of one that reads
    the user's rows (the graph's build, its check against the database, the learnings'
    count) runs with no parallel workers, set in its own transaction (``loader.ONE_CORE``);
    and the check reads the seqs as one value, not a row each."""
    from contextlib import nullcontext

    import psycopg

    statements: list[str] = []

    class Recording(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            statements.append(str(query))
            return super().execute(query, params, **kw)

    _kept_by_one_process(pg_url, tmp_path, _low_rank(300, seed=3))
    reader = _sql_store(pg_url)
    kept = _files(reader, tmp_path).read("alice")
    reader.close()
    assert kept is not None
    with psycopg.connect(pg_url, autocommit=True, cursor_factory=Recording) as conn:
        graph = held_graph.restored(conn, "alice", kept.revision, kept.index)
        assert graph is not None and graph.dead == 0 and len(graph.index) == 300
        assert held_graph.read(conn, "alice", 2**26, lambda: False) is not None
        learned = postgres.learnings.Learnings(lambda: nullcontext(conn), 1, background=False)
        learned.start_load("alice")  # counted in the calling thread
        assert learned._loader.get("alice") is not None
    reads = [i for i, s in enumerate(statements) if "FROM memories m" in s]
    assert len(reads) >= 4  # the check's seqs and rows, the build's count, the learnings'
    for at in reads:
        begun = max(i for i in range(at) if statements[i].startswith(("BEGIN", "SET TRANSACTION")))
        assert postgres.loader.ONE_CORE in statements[begun:at], statements[at]
    (seqs,) = [s for s in statements if s == held_graph.POOL.seqs_sql]
    assert seqs.startswith("SELECT string_agg(")
