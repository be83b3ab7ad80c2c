"""The Chroma backend beyond the contract suite: its URLs, the extra it needs, what it puts
in Chroma, and how the ledger keeps Chroma in step with the sidecar when a write fails
halfway or the collection is stale."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.errors import ConfigError, StoreError
from engrain.model import Memory
from engrain.store import MemoryFilter, Patch, known_schemes, open_store
from engrain.store.chroma.url import ChromaTarget, parse_url

from .chroma import http_url
from .test_store_contract import mem, unit

chromadb = pytest.importorskip("chromadb")

import engrain.store.chroma as chroma_store  # noqa: E402
from engrain.store.chroma import ChromaStore  # noqa: E402
from engrain.store.chroma.index import collection_name  # noqa: E402

# -- URLs -----------------------------------------------------------------------------------


def test_embedded_urls_name_a_directory_and_a_sidecar_inside_it() -> None:
    relative = parse_url("chroma://data/chroma")
    assert relative == ChromaTarget(
        collection="engrain", sidecar=Path("data/chroma/engrain.db"), path=Path("data/chroma")
    )
    absolute = parse_url("chroma:///srv/chroma?collection=team.memories&state=/var/s.db")
    assert absolute.path == Path("/srv/chroma") and absolute.embedded
    assert (absolute.collection, absolute.sidecar) == ("team.memories", Path("/var/s.db"))


def test_server_urls_need_a_sidecar_and_default_the_port() -> None:
    target = parse_url("chroma+http://chroma.internal?state=/var/engrain/state.db")
    assert (target.host, target.port, target.ssl) == ("chroma.internal", 8000, False)
    assert target.sidecar == Path("/var/engrain/state.db") and not target.embedded
    secure = parse_url("chroma+https://[::1]:9443/?state=s.db&tenant=t&database=d")
    assert (secure.host, secure.port, secure.ssl) == ("::1", 9443, True)
    assert (secure.tenant, secure.database) == ("t", "d")
    assert parse_url("chroma+https://h?state=s.db").port == 443


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("chroma://", "has no path"),
        ("chroma+http://localhost:8000", "state="),
        ("chroma+http://localhost:8000?state=", "state="),
        ("chroma+http://localhost:99999?state=s.db", "bad host or port"),
        ("chroma+http://user:pw@localhost:8000?state=s.db", "host:port"),
        ("chroma+http://localhost:8000/api?state=s.db", "host:port"),
        ("chroma://d?colection=x", "unknown option(s) colection"),
        ("chroma://d?tenant=t", "unknown option(s) tenant"),
        ("chroma://d?collection=a&collection=b", "given twice"),
        ("chroma://d?collection=x", "not valid"),
        ("chroma://d?collection=-bad-", "not valid"),
        ("chroma://d?collection=a..b", "not valid"),
        ("chroma+ftp://d", "not a Chroma store URL"),
    ],
)
def test_malformed_urls_are_config_errors_before_any_io(
    url: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        open_store(url) if url.startswith("chroma:") else parse_url(url)
    assert list(tmp_path.iterdir()) == []


def test_the_schemes_are_registered() -> None:
    assert {"chroma", "chroma+http", "chroma+https"} <= set(known_schemes())


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_import_engrain_never_imports_chromadb() -> None:
    done = _python(
        "import sys, engrain, engrain.store; from engrain import Engine; "
        "print('chromadb' in sys.modules)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_without_the_extra_a_chroma_url_names_the_install_command(tmp_path: Path) -> None:
    # chromadb made unimportable, as in an install without the extra
    done = _python(
        "import sys; sys.modules['chromadb'] = None\n"
        "from engrain.errors import ConfigError\n"
        "from engrain.store import open_store\n"
        "try:\n"
        f"    open_store('chroma://{tmp_path}/c')\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'engrain[chroma]'" in done.stdout
    assert not (tmp_path / "c").exists()


def test_a_server_that_is_not_there_is_a_store_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreError, match=r"Chroma at 127\.0\.0\.1"):
        open_store(f"chroma+http://127.0.0.1:{port}?state={tmp_path / 's.db'}")


# -- what Chroma holds ----------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ChromaStore]:
    backend = open_store(f"chroma://{tmp_path / 'chroma'}")
    assert isinstance(backend, ChromaStore)
    yield backend
    backend.close()


def raw_collection(path: Path, user_id: str = "alice", prefix: str = "engrain") -> Any:
    """A user's collection as any other Chroma user sees it."""
    client = chromadb.PersistentClient(path=str(path))
    return client.get_collection(collection_name(prefix, user_id), embedding_function=None)


def test_chroma_holds_each_embedded_memory_with_its_text_and_filter_fields(
    store: ChromaStore, tmp_path: Path
) -> None:
    store.write([
        mem("a", content="tabs over spaces", project="web", key="indent", pinned=True),
        mem("b", vector=None),  # nothing to search: not in Chroma
        mem("a", "bob", content="bob's a"),
    ])  # fmt: skip

    alices = raw_collection(tmp_path / "chroma")
    got = alices.get(include=["documents", "metadatas", "embeddings"])

    assert alices.metadata == {"engrain_user_id": "alice"}
    assert got["ids"] == ["a"] and got["documents"] == ["tabs over spaces"]
    assert raw_collection(tmp_path / "chroma", "bob").get()["documents"] == ["bob's a"]
    meta = got["metadatas"][0]
    assert (meta["project"], meta["key"], meta["pinned"], meta["muted"]) == (
        "web",
        "indent",
        True,
        False,
    )
    assert "session_id" not in meta  # Chroma has no null: an absent field is absent
    np.testing.assert_allclose(got["embeddings"][0], unit(1, 0, 0, 0), rtol=1e-6)


def test_the_collection_is_cosine_and_never_embeds(store: ChromaStore, tmp_path: Path) -> None:
    store.write([mem("a")])
    configuration = raw_collection(tmp_path / "chroma").configuration_json
    assert configuration["hnsw"]["space"] == "cosine"
    # "legacy" is what Chroma records for embedding_function=None: it has none to call
    assert configuration["embedding_function"] == {"type": "legacy"}


def test_chroma_never_embeds_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chromadb.api.types import DefaultEmbeddingFunction
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("Chroma embedded a text")

    for cls in (DefaultEmbeddingFunction, ONNXMiniLM_L6_V2):
        monkeypatch.setattr(cls, "__call__", refuse)
    store = open_store(f"chroma://{tmp_path / 'chroma'}")
    try:
        store.write([mem("a", content="a text Chroma could embed")])
        store.write(patches=[Patch("alice", "a", {"content": "another"})])
        assert [m.id for m, _ in store.search("alice", unit(1, 0, 0, 0), 1)] == ["a"]
    finally:
        store.close()


def test_a_collection_in_another_space_is_refused(tmp_path: Path) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    client.create_collection(
        collection_name("engrain", "alice"),
        embedding_function=None,
        configuration={"hnsw": {"space": "l2"}},
    )
    store = open_store(f"chroma://{tmp_path / 'chroma'}")
    try:
        store.write([mem("a")])  # committed in the sidecar; Chroma refused
        with pytest.raises(StoreError, match="not cosine"):
            store.search("alice", unit(1, 0, 0, 0), 1)
        assert [m.id for m in store.query("alice")] == ["a"]
    finally:
        store.close()


def test_patches_and_deletes_reach_chroma(store: ChromaStore, tmp_path: Path) -> None:
    store.write([mem("a"), mem("b")])
    store.write(patches=[Patch("alice", "a", {"muted": True})], deletes=[mem("b")])

    got = raw_collection(tmp_path / "chroma").get(include=["metadatas"])
    assert got["ids"] == ["a"]
    assert got["metadatas"][0]["muted"] is True


def test_when_the_nearest_all_fail_the_filter_chroma_filters(
    store: ChromaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More blocked memories nearer than the first, unfiltered ask reaches: the few that
    pass are searched exactly in the sidecar, or, when many pass, Chroma filters; either
    way the k that pass come back."""
    blocked = [mem(f"muted{i}", vector=(1, 0.01 * i, 0, 0), muted=True) for i in range(40)]
    allowed = [mem(f"ok{i}", vector=(0.2 * i, 1, 0, 0)) for i in range(4)]
    store.write(blocked + allowed)
    asks: list[MemoryFilter | None] = []
    nearest = store._index.nearest

    def counted(user_id: str, vector: Any, n: int, flt: MemoryFilter | None = None) -> Any:
        asks.append(flt)
        return nearest(user_id, vector, n, flt)

    monkeypatch.setattr(store._index, "nearest", counted)
    flt = MemoryFilter(include_muted=False)

    found = store.search("alice", unit(1, 0, 0, 0), 3, flt)
    assert [m.id for m, _ in found] == ["ok3", "ok2", "ok1"]
    assert asks == [None]  # 4 pass: searched exactly in the sidecar

    asks.clear()
    monkeypatch.setattr(chroma_store, "EXACT_MAX", 3)  # as if many passed
    monkeypatch.setattr(chroma_store, "EXACT_SHARE", 0.05)
    found = store.search("alice", unit(1, 0, 0, 0), 3, flt)
    assert [m.id for m, _ in found] == ["ok3", "ok2", "ok1"]
    assert asks == [None, flt]
    asks.clear()
    assert [m.id for m, _ in store.search("alice", unit(1, 0, 0, 0), 3)] == [
        "muted0",
        "muted1",
        "muted2",
    ]
    assert asks == [None]  # enough passed the first ask


def test_a_filter_few_pass_widens_the_unfiltered_ask_first(
    store: ChromaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One memory in five passes: the first ask (k × 2 + 10) holds too few, a wider
    unfiltered ask sized by that share holds enough, and Chroma never filters."""
    store.write([mem(f"m{i:03}", vector=(1, i / 200, 0, 0), muted=i % 5 != 0)
                 for i in range(200)])  # fmt: skip
    asks: list[tuple[int, MemoryFilter | None]] = []
    nearest = store._index.nearest

    def counted(user_id: str, vector: Any, n: int, flt: MemoryFilter | None = None) -> Any:
        asks.append((n, flt))
        return nearest(user_id, vector, n, flt)

    monkeypatch.setattr(store._index, "nearest", counted)
    monkeypatch.setattr(chroma_store, "EXACT_MAX", 10)  # 40 pass: too many to search exactly
    monkeypatch.setattr(chroma_store, "EXACT_SHARE", 0.1)

    found = store.search("alice", unit(1, 0, 0, 0), 10, MemoryFilter(include_muted=False))

    assert [m.id for m, _ in found] == [f"m{i:03}" for i in range(0, 50, 5)]
    assert [flt for _, flt in asks] == [None, None] and asks[1][0] > asks[0][0]


def test_search_many_answers_each_search_as_search_does(store: ChromaStore) -> None:
    store.write([
        mem(f"m{i}", vector=(1, i / 10, (i % 3) / 3, 0), muted=i % 4 == 0, importance=i / 20)
        for i in range(20)
    ])  # fmt: skip
    query = unit(1, 0.3, 0.2, 0)
    searches = [
        (5, MemoryFilter()), (3, MemoryFilter(include_muted=False)), (0, MemoryFilter()),
        (30, MemoryFilter(min_importance=0.5)), (2, MemoryFilter(project="none")),
    ]  # fmt: skip

    many = store.search_many("alice", query, searches)

    def named(found: list[tuple[Memory, float]]) -> list[tuple[str, float]]:
        return [(m.id, round(score, 6)) for m, score in found]

    assert [named(f) for f in many] == [named(store.search("alice", query, k, flt))
                                        for k, flt in searches]  # fmt: skip
    assert [len(f) for f in many] == [5, 3, 0, 10, 0]


# -- the ledger -----------------------------------------------------------------------------


def in_step(store: ChromaStore, user: str) -> bool:
    return store._ledger.synced(user) == store.revision(user)


def test_a_write_whose_chroma_step_fails_stands_and_the_next_search_repairs(
    store: ChromaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write([mem("old", vector=(0, 1, 0, 0))])

    def down(*_: Any) -> None:
        raise StoreError("Chroma went away")

    with monkeypatch.context() as patched:
        patched.setattr(store._index, "upsert", down)
        store.write([mem("new", vector=(1, 0, 0, 0))])  # committed in the sidecar

    assert [m.id for m in store.get("alice", ["new"])] == ["new"]
    assert not in_step(store, "alice")
    found = store.search("alice", unit(1, 0, 0, 0), 1)
    assert [m.id for m, _ in found] == ["new"]
    assert in_step(store, "alice")


def test_a_search_while_chroma_is_down_raises_instead_of_answering_stale(
    store: ChromaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write([mem("old")])

    def down(*_: Any) -> None:
        raise StoreError("Chroma went away")

    monkeypatch.setattr(store._index, "upsert", down)
    store.write([mem("new")])
    with pytest.raises(StoreError, match="went away"):
        store.search("alice", unit(1, 0, 0, 0), 5)


def test_a_write_the_sidecar_refuses_leaves_chroma_and_the_ledger_as_they_were(
    store: ChromaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write([mem("a")])
    calls: list[str] = []
    monkeypatch.setattr(store._index, "upsert", lambda *_: calls.append("upsert"))

    def refuse(*_: Any, **__: Any) -> None:
        raise StoreError("disk full")

    monkeypatch.setattr(store._sidecar, "write", refuse)
    with pytest.raises(StoreError, match="disk full"):
        store.write([mem("b")])

    assert calls == [] and in_step(store, "alice")


def test_a_stale_collection_is_repaired_not_believed(tmp_path: Path) -> None:
    """A sidecar started afresh beside a collection that still holds old records (the
    sidecar file was deleted, say): the old records never come back as results."""
    first = open_store(f"chroma://{tmp_path / 'chroma'}?state={tmp_path / 'one.db'}")
    first.write([mem("ghost", vector=(1, 0, 0, 0)), mem("kept", vector=(0.9, 0.1, 0, 0))])
    first.close()
    second = open_store(f"chroma://{tmp_path / 'chroma'}?state={tmp_path / 'two.db'}")
    try:
        assert second.search("alice", unit(1, 0, 0, 0), 5) == []
        second.write([mem("fresh", vector=(0, 1, 0, 0))])
        assert [m.id for m, _ in second.search("alice", unit(1, 0, 0, 0), 5)] == ["fresh"]
    finally:
        second.close()
    assert raw_collection(tmp_path / "chroma").get(include=[])["ids"] == ["fresh"]


def test_a_collection_deleted_behind_engrains_back_is_rebuilt(
    store: ChromaStore, tmp_path: Path
) -> None:
    store.write([mem("a", vector=(1, 0, 0, 0))])
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    client.delete_collection(collection_name("engrain", "alice"))

    # the store still holds a handle to the deleted collection: opened again, then rebuilt
    assert [m.id for m, _ in store.search("alice", unit(1, 0, 0, 0), 5)] == ["a"]
    store.write([mem("b", vector=(0, 1, 0, 0))])
    client.delete_collection(collection_name("engrain", "alice"))
    store.write([mem("c", vector=(0, 0, 1, 0))])  # a write reopens (creates) it too
    assert {m.id for m, _ in store.search("alice", unit(1, 0, 0, 0), 5)} == {"a", "b", "c"}


def test_a_new_collection_over_an_existing_sidecar_is_filled_from_it(tmp_path: Path) -> None:
    base = f"chroma://{tmp_path / 'chroma'}?state={tmp_path / 's.db'}"
    first = open_store(base)
    first.write([mem("a", vector=(1, 0, 0, 0)), mem("b", vector=(0, 1, 0, 0))])
    first.close()
    renamed = open_store(f"{base}&collection=renamed")
    try:
        found = renamed.search("alice", unit(0, 1, 0, 0), 1, MemoryFilter())
        assert [m.id for m, _ in found] == ["b"]
    finally:
        renamed.close()


def test_a_sqlite_store_moves_into_chroma_with_copy_store(tmp_path: Path) -> None:
    from engrain.store.sqlite import SQLiteStore
    from engrain.store.transfer import copy_store

    source = SQLiteStore(tmp_path / "old.db")
    source.write([mem(f"m{i}", vector=(1, i / 10, 0, 0), minutes=i) for i in range(30)]
                 + [mem("b1", "bob", vector=None)])  # fmt: skip
    target = open_store(f"chroma://{tmp_path / 'chroma'}")
    try:
        copy_store(source, target, verify=True)
        assert [m.id for m in target.query("alice")] == [m.id for m in source.query("alice")]
        assert target.users() == ["alice", "bob"]
        query = unit(1, 0.5, 0, 0)
        assert [(m.id, round(s, 6)) for m, s in target.search("alice", query, 5)] == [
            (m.id, round(s, 6)) for m, s in source.search("alice", query, 5)
        ]
    finally:
        source.close()
        target.close()


# -- over HTTP: two stores sharing a server and a sidecar, like two processes ----------------


def test_two_stores_on_one_server_and_sidecar_see_each_others_writes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = http_url(request.getfixturevalue("chroma_server"), tmp_path / "shared.db")
    writer, reader = open_store(url), open_store(url)
    try:
        writer.write([mem("a", vector=(1, 0, 0, 0))])
        assert [m.id for m, _ in reader.search("alice", unit(1, 0, 0, 0), 5)] == ["a"]
        reader.write([mem("b", vector=(1, 0.1, 0, 0))], deletes=[mem("a")])
        found: list[tuple[Memory, float]] = writer.search("alice", unit(1, 0, 0, 0), 5)
        assert [m.id for m, _ in found] == ["b"]
        assert writer.revision("alice") == reader.revision("alice")
    finally:
        writer.close()
        reader.close()


def test_another_process_writing_through_the_server_is_seen_at_once(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = http_url(request.getfixturevalue("chroma_server"), tmp_path / "shared.db")
    here = open_store(url)
    try:
        here.write([mem("mine", vector=(0, 1, 0, 0))])
        assert [m.id for m, _ in here.search("alice", unit(1, 0, 0, 0), 1)] == ["mine"]
        done = subprocess.run(
            [sys.executable, "-c",
             "import sys\n"
             "from engrain.store import open_store\n"
             "from tests.test_store_contract import mem\n"
             "store = open_store(sys.argv[1])\n"
             "store.write([mem('theirs', vector=(1, 0, 0, 0))], deletes=[mem('mine')])\n"
             "store.close()\n",
             url],
            capture_output=True, text=True, timeout=120, check=False,
            cwd=Path(__file__).resolve().parents[1],
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert [m.id for m, _ in here.search("alice", unit(1, 0, 0, 0), 5)] == ["theirs"]
        assert [m.id for m in here.query("alice")] == ["theirs"]
    finally:
        here.close()
