"""A large PostgreSQL user's typed learnings searched in process (``store/postgres/learnings.py``):
exact, equal to the SQL path's exact search under every filter field, never returning a
learning forgotten, superseded or muted before the call, finding one another store or
another process committed, and bounded by bytes; held at two bytes a value
(``quantized.py``) and ranked by the float32 vectors read with the rows, bit for bit. A
change made through a *second* store is a change another process makes (its caches are its
own); one test writes from a real one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engrain.errors import ConfigError
from engrain.model import Kind, MemoryType
from engrain.store.base import ALL, MemoryFilter, Patch

from .conftest import NOW
from .test_store_contract import mem

pytest.importorskip("psycopg")
postgres = pytest.importorskip("engrain.store.postgres")
learnings = postgres.learnings
PostgresStore = postgres.PostgresStore

DIM = postgres.INDEXED_DIM
TYPED = ALL.update(kinds=tuple(Kind(k) for k in postgres.schema.LEARNING_KINDS))
LEARNING_KINDS = [Kind.DECISION, Kind.PREFERENCE, Kind.PATTERN, Kind.INVARIANT]


def _vector(rng: np.random.Generator) -> Any:
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def _corpus(n: int, seed: int = 0, user: str = "alice") -> list[Any]:
    """``n`` memories, about half learnings, with every field a filter reads varied."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        learning = i % 2 == 0
        kind = LEARNING_KINDS[i % 4] if learning else (Kind.FACT, Kind.EVENT)[i % 3 % 2]
        out.append(
            mem(
                f"m{seed}-{i:04d}",
                user,
                minutes=i,
                vector=_vector(rng),
                kind=kind,
                memory_type=MemoryType.PROCEDURAL if i % 8 == 0 else MemoryType.SEMANTIC,
                project=("app", "ops", None)[i % 3],
                session_id=("s1", "s2")[i % 5 % 2],
                key=f"k{i % 7}" if i % 7 == 0 else None,
                compressed=i % 11 == 0,
                muted=i % 13 == 0,
                superseded_by="m0-0000" if i % 17 == 0 and i > 0 else None,
                importance=float(rng.uniform(0.0, 1.0)),
                pinned=i % 9 == 0,
            )
        )
    return out


def _store(url: str, **options: Any) -> Any:
    """A store that walks the graphs for any user (every user is "large" here)."""
    return PostgresStore(url, pool_size=3, exact_search_below=1, indexed_share=0.0, **options)


@pytest.fixture
def stores(pg_url: str) -> Iterator[tuple[Any, Any, Any]]:
    """This process's store, another "process's" store, and the SQL path's exact search
    (no learnings held, no graph walked) as the truth."""
    mine, other = _store(pg_url), _store(pg_url, learnings_bytes=0)
    truth = PostgresStore(pg_url, pool_size=2, exact_search_below=10**9, learnings_bytes=0)
    yield mine, other, truth
    for store in (mine, other, truth):
        store.close()


def _held(store: Any, user: str = "alice") -> Any:
    """Load the user's learnings (the first search is served by SQL and starts the load)."""
    store.search(user, np.ones(DIM, dtype=np.float32), 1, TYPED)
    assert store.wait_for_learnings(user, timeout=60)
    return store._learnings


def _same(found: list[tuple[Any, float]], expected: list[tuple[Any, float]]) -> None:
    assert [m.id for m, _ in found] == [m.id for m, _ in expected]
    assert [m for m, _ in found] == [m for m, _ in expected]  # every field, counts included
    for (mine, _), (theirs, _) in zip(found, expected, strict=True):  # (== skips vectors)
        assert mine.embedding is not None and theirs.embedding is not None
        assert mine.embedding.dtype == np.float32
        assert mine.embedding.tobytes() == theirs.embedding.tobytes()  # bit for bit
    np.testing.assert_allclose([s for _, s in found], [s for _, s in expected], atol=1e-5)


def test_held_learnings_search_exactly_as_the_sql_exact_search(stores: Any) -> None:
    mine, _, truth = stores
    mine.write(_corpus(300))
    held = _held(mine)
    served = held.calls["served"]
    rng = np.random.default_rng(5)
    for _ in range(5):
        query = _vector(rng)
        _same(mine.search("alice", query, 40, TYPED), truth.search("alice", query, 40, TYPED))
    assert held.calls["served"] == served + 5  # none of them walked the graph


@pytest.mark.parametrize(
    "changes",
    [
        {"project": "app"},
        {"project": "nowhere"},
        {"memory_types": (MemoryType.PROCEDURAL,)},
        {"kinds": (Kind.DECISION, Kind.PREFERENCE)},
        {"session_id": "s2"},
        {"key": "k0"},
        {"include_compressed": False, "include_muted": False, "include_superseded": False},
        {"min_importance": 0.5},
        {"pinned": True},
        {"pinned": False, "project": "ops", "min_importance": 0.2},
    ],
)
def test_every_filter_field_selects_what_sql_selects(stores: Any, changes: Any) -> None:
    mine, _, truth = stores
    mine.write(_corpus(200, seed=1))
    held = _held(mine)
    served = held.calls["served"]
    flt = TYPED.update(**changes)
    query = _vector(np.random.default_rng(9))
    found = mine.search("alice", query, 100, flt)
    _same(found, truth.search("alice", query, 100, flt))
    assert all(flt.matches(m) for m, _ in found)
    assert held.calls["served"] == served + 1


def test_nothing_forgotten_superseded_or_muted_by_another_store_is_returned(stores: Any) -> None:
    mine, other, truth = stores
    corpus = _corpus(120, seed=2)
    mine.write(corpus)
    held = _held(mine)
    flt = TYPED.update(include_muted=False, include_superseded=False)
    target = next(m for m in corpus if m.kind in LEARNING_KINDS and flt.matches(m))
    query = target.embedding
    first = [m.id for m, _ in mine.search("alice", query, 10, flt)]
    assert first[0] == target.id
    gone, superseded, muted = (next(m for m in corpus if m.id == i) for i in first[:3])
    other.write(
        deletes=[gone],
        patches=[
            Patch("alice", superseded.id, {"superseded_by": corpus[1].id}),
            Patch("alice", muted.id, {"muted": True}),
        ],
    )
    caught, again = held.calls["caught_up"], held.calls["fetched_again"]
    found = mine.search("alice", query, 10, flt)
    assert {gone.id, superseded.id, muted.id}.isdisjoint(m.id for m, _ in found)
    _same(found, truth.search("alice", query, 10, flt))
    assert held.calls["caught_up"] == caught + 1
    assert held.calls["fetched_again"] == again + 1  # three rows past the first ten read
    assert len(held._held["alice"].ids) == len([m for m in corpus if m.kind in LEARNING_KINDS]) - 1


def test_a_learning_another_store_adds_is_found_and_a_promotion_keeps_the_matrix(
    stores: Any,
) -> None:
    mine, other, truth = stores
    mine.write(_corpus(80, seed=3))
    held = _held(mine)
    query = _vector(np.random.default_rng(11))
    new = mem("new", vector=query, kind=Kind.DECISION, content="always deploy on tuesdays")
    other.write([new])
    found = mine.search("alice", query, 5, TYPED)
    assert found[0][0].id == "new"
    _same(found, truth.search("alice", query, 5, TYPED))
    before = held._held["alice"]
    other.write(patches=[Patch("alice", "new", {"promoted_at": NOW})])
    other.record_uses("alice", ["new", "new"], NOW)
    # committed after the call by default (ENGRAIN_DEFER_USES): the other process's next
    # statement runs after them
    other.count("alice")
    found = mine.search("alice", query, 5, TYPED)
    after = held._held["alice"]
    assert after.revision == before.revision + 1 and after.ids is before.ids  # no copy
    assert found[0][0].promoted_at == NOW and found[0][0].access_count == 2  # read fresh
    _same(found, truth.search("alice", query, 5, TYPED))


def test_a_learning_another_process_commits_is_found(stores: Any, pg_url: str) -> None:
    mine, _, _ = stores
    mine.write(_corpus(60, seed=4))
    _held(mine)
    query = _vector(np.random.default_rng(12))
    script = textwrap.dedent(
        f"""
        import numpy as np
        from engrain.model import Kind
        from engrain.store.postgres import PostgresStore
        from tests.test_store_contract import mem
        store = PostgresStore({pg_url!r}, pool_size=1)
        vector = np.asarray({query.tolist()!r}, dtype=np.float32)
        store.write([mem("theirs", vector=vector, kind=Kind.PREFERENCE, content="tabs")])
        store.close()
        """
    )
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=root, timeout=120)
    found = mine.search("alice", query, 3, TYPED)
    assert found[0][0].id == "theirs"
    assert mine._learnings.calls["caught_up"] >= 1


def test_a_delta_too_large_is_served_by_sql_and_loaded_again(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other, truth = stores
    monkeypatch.setattr(learnings, "RELOAD_PAUSE", 0.0)
    mine.write(_corpus(60, seed=6))
    held = _held(mine)
    monkeypatch.setattr(learnings, "DELTA_ROWS", 3)
    other.write(_corpus(10, seed=7))  # ten rows changed
    query = _vector(np.random.default_rng(13))
    by_sql = held.calls["by_sql"]
    _same(mine.search("alice", query, 20, TYPED), truth.search("alice", query, 20, TYPED))
    assert held.calls["by_sql"] == by_sql + 1
    deadline = time.monotonic() + 60  # loaded again once the pause after a load passed
    while not mine.wait_for_learnings("alice", timeout=60) and time.monotonic() < deadline:
        time.sleep(0.1)
        mine.search("alice", query, 1, TYPED)
    assert held._held["alice"].revision == other.revision("alice")
    served = held.calls["served"]
    _same(mine.search("alice", query, 20, TYPED), truth.search("alice", query, 20, TYPED))
    assert held.calls["served"] == served + 1


def test_held_bytes_are_bounded_least_recently_used_first(pg_url: str) -> None:
    probe = _store(pg_url)
    try:
        probe.write(_corpus(40, seed=8, user="bob") + _corpus(40, seed=9, user="carol"))
        one = _held(probe, "bob")._held["bob"].nbytes
    finally:
        probe.close()
    assert one >= 20 * DIM * learnings.VALUE_BYTES  # twenty learnings' vectors at least
    store = _store(pg_url, learnings_bytes=int(1.5 * one))
    try:
        _held(store, "bob")
        assert store._learnings.nbytes == one
        _held(store, "carol")  # both do not fit: bob, used least recently, goes
        assert not store._learnings.held("bob") and store._learnings.held("carol")
    finally:
        store.close()
    tiny = _store(pg_url, learnings_bytes=one - 1)
    try:
        tiny.search("bob", np.ones(DIM, dtype=np.float32), 1, TYPED)
        assert not tiny.wait_for_learnings("bob", timeout=60)  # larger than the bound
        assert tiny._learnings.nbytes == 0
    finally:
        tiny.close()


def test_learnings_counted_above_the_bound_are_not_read_and_counted_again_later(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user whose learnings exceed the bound (a million memories: ~220,000) is refused on
    the count, before any row is read, and not counted again for ``REFUSED_PAUSE`` s; a
    user who fits is read and paced by ``RELOAD_PAUSE`` as before."""
    probe = _store(pg_url)
    try:
        probe.write(_corpus(40, seed=10, user="dave") + _corpus(20, seed=11, user="erin"))
        dave = _held(probe, "dave")._held["dave"].nbytes
        erin = _held(probe, "erin")._held["erin"].nbytes
    finally:
        probe.close()
    assert erin < dave
    decoded: list[int] = []
    stored = learnings._stored_vectors
    monkeypatch.setattr(
        learnings,
        "_stored_vectors",
        lambda rows, out: (decoded.append(len(rows)), stored(rows, out)),
    )
    store = _store(pg_url, learnings_bytes=dave - 1)
    try:
        store.search("dave", np.ones(DIM, dtype=np.float32), 1, TYPED)
        assert not store.wait_for_learnings("dave", timeout=60)
        assert decoded == []  # refused on the count: no row read
        pause = store._learnings._loader.get("dave").not_before - time.monotonic()
        assert learnings.REFUSED_PAUSE - 60 < pause <= learnings.REFUSED_PAUSE
        store.search("dave", np.ones(DIM, dtype=np.float32), 1, TYPED)
        assert store._learnings._loader.get("dave").thread is None  # no new load meanwhile
        assert _held(store, "erin").held("erin")  # one that fits is read
        assert sum(decoded) == 10
        pause = store._learnings._loader.get("erin").not_before - time.monotonic()
        assert pause < learnings.REFUSED_PAUSE / 2  # paced as a read, not as a refusal
    finally:
        store.close()


def test_small_vectors_and_other_filters_never_use_it(stores: Any) -> None:
    mine, _, _ = stores
    mine.write([*_corpus(40, seed=10), mem("tiny", kind=Kind.DECISION)])  # a 4-d vector
    held = _held(mine)
    served = held.calls["served"]
    mine.search("alice", np.ones(4, dtype=np.float32), 5, TYPED)
    mine.search("alice", _vector(np.random.default_rng(1)), 5, ALL)
    mine.search("alice", _vector(np.random.default_rng(1)), 5, MemoryFilter(kinds=(Kind.FACT,)))
    assert held.calls["served"] == served


def test_the_bound_reads_its_variable() -> None:
    assert learnings.learnings_bytes({}) == learnings.LEARNINGS_BYTES
    assert learnings.learnings_bytes({"ENGRAIN_PG_LEARNINGS_MB": "off"}) == 0
    assert learnings.learnings_bytes({"ENGRAIN_PG_LEARNINGS_MB": "0"}) == 0
    assert learnings.learnings_bytes({"ENGRAIN_PG_LEARNINGS_MB": "12"}) == 12 * 2**20
    with pytest.raises(ConfigError, match="ENGRAIN_PG_LEARNINGS_MB='lots'"):
        learnings.learnings_bytes({"ENGRAIN_PG_LEARNINGS_MB": "lots"})


def test_a_held_search_is_one_round_trip_and_a_promotion_adds_none(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from psycopg._pipeline_base import BasePipeline

    mine, other, _ = stores
    corpus = _corpus(60, seed=14)
    mine.write(corpus)
    _held(mine)
    query = _vector(np.random.default_rng(15))
    mine.search("alice", query, 10, TYPED)  # the plan is kept from here on
    syncs = [0]
    original = BasePipeline._enqueue_sync

    def counted(self: Any) -> None:
        syncs[0] += 1
        original(self)

    monkeypatch.setattr(BasePipeline, "_enqueue_sync", counted)
    mine.search("alice", query, 10, TYPED)
    assert syncs[0] == 1  # revision, changed rows and the rows found: one pipeline
    learning = next(m for m in corpus if m.kind in LEARNING_KINDS)
    other.write(patches=[Patch("alice", learning.id, {"promoted_at": NOW})])
    syncs[0] = 0
    mine.search("alice", query, 10, TYPED)
    assert syncs[0] == 1  # caught up in the same round trip: nothing it ranks changed


def _float32_top(memories: Sequence[Any], query: Any, k: int) -> list[tuple[str, float]]:
    """The exact search over float32 vectors as a held float32 matrix ranked them (one
    product over every row, scaled by each row's inverse length; ties by seq, here the
    order written): the answer the held steps must give, bit for bit."""
    vectors = np.stack([m.embedding for m in memories])
    scores = np.einsum("ij,j->i", vectors, query)
    norms = np.linalg.norm(vectors, axis=1)
    inverse = np.zeros(len(memories), dtype=np.float32)
    np.divide(1.0, norms, out=inverse, where=norms > 0)
    scores *= inverse
    order = sorted(range(len(memories)), key=lambda i: (-scores[i], i))[:k]
    return [(memories[i].id, float(scores[i])) for i in order]


def test_learnings_the_steps_cannot_tell_apart_are_ranked_by_their_float32_vectors(
    stores: Any,
) -> None:
    """Forty learnings at 60° from the query, each a millionth nearer than the one before,
    the last three equal: the held steps cannot order them (each is within ~10⁻⁴ of its
    float32 vector), so all are candidates, read with their vectors and ranked exactly; the
    answer is a float32 product over every vector's: ids, order, ties by seq and scores bit
    for bit."""
    mine, _, truth = stores
    rng = np.random.default_rng(21)
    query, side = _vector(rng), _vector(rng)
    side -= (side @ query) * query
    side /= np.linalg.norm(side)
    steps = [*range(37), 40, 40, 40]
    near = [
        mem(f"near-{i:02d}", minutes=i, kind=Kind.DECISION,
            vector=(0.5 + step * 1e-6) * query + 0.866 * side)
        for i, step in enumerate(steps)
    ]  # fmt: skip
    far = _corpus(60, seed=22)
    mine.write(near + far)
    held = _held(mine)
    written = {m.id: m for m in truth.get("alice", [m.id for m in near + far])}
    learned = [written[m.id] for m in near + far if m.kind in LEARNING_KINDS]
    unit = postgres.searches._unit(query)
    candidates = held._held["alice"].candidates(unit, 10, TYPED)
    assert {m.id for m in near} <= set(candidates)  # every near one is a candidate
    found = mine.search("alice", query, 10, TYPED)
    expected = _float32_top(learned, unit, 10)
    rows = held._held["alice"]
    by_steps = np.argsort(-rows.approximate(unit), kind="stable")
    assert [rows.ids[i] for i in by_steps[:10]] != [i for i, _ in expected]  # steps alone: wrong
    assert [(m.id, s) for m, s in found] == expected  # scores as floats, bit for bit
    assert [m.id for m, _ in found][:4] == ["near-37", "near-38", "near-39", "near-36"]
    assert all(written[m.id].embedding.tobytes() == m.embedding.tobytes() for m, _ in found)


def test_a_learning_moved_less_than_a_step_is_seen_by_its_digest(stores: Any) -> None:
    """Another store moves a learning's vector by one float32 ulp in one value, which its
    steps cannot show: the held rows are replaced (the digest differs), and the search
    returns the new vector, scored by it."""
    mine, other, truth = stores
    corpus = _corpus(60, seed=23)
    mine.write(corpus)
    held = _held(mine)
    target = next(m for m in corpus if m.kind in LEARNING_KINDS)
    before = held._held["alice"]
    moved = np.array(target.embedding, dtype=np.float32)
    moved[0] = np.nextafter(moved[0], np.float32(2.0))
    other.write([replace(target, embedding=moved)])
    found = mine.search("alice", target.embedding, 3, TYPED)
    after = held._held["alice"]
    assert after.ids is not before.ids  # the row was replaced, not kept as unchanged
    assert found[0][0].id == target.id
    assert found[0][0].embedding.tobytes() == moved.tobytes()
    _same(found, truth.search("alice", target.embedding, 3, TYPED))


def test_held_learnings_keep_two_bytes_a_value(pg_url: str) -> None:
    """A user whose learnings' float32 vectors alone exceed the bound is held at two bytes
    a value (and searched exactly); none of its vectors is held as float32."""
    store = _store(pg_url, learnings_bytes=20 * DIM * 3)  # twenty learnings at 3 bytes a value
    truth = PostgresStore(pg_url, pool_size=1, exact_search_below=10**9, learnings_bytes=0)
    try:
        store.write(_corpus(40, seed=24, user="faye"))  # twenty learnings
        held = _held(store, "faye")
        assert held.held("faye")
        rows = held._held["faye"]
        assert len(rows.ids) == 20 and rows.nbytes <= 20 * DIM * 3
        assert not any(
            isinstance(v, np.ndarray)
            and v.dtype == np.float32
            and v.ndim == 2
            and v.shape[1] == DIM
            for v in vars(rows).values()
        )
        query = _vector(np.random.default_rng(25))
        _same(store.search("faye", query, 8, TYPED), truth.search("faye", query, 8, TYPED))
    finally:
        store.close()
        truth.close()


def test_many_learnings_are_held_in_a_basis_and_found_in_stages_as_sql_finds_them(
    stores: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user with at least ``quantized.STAGED_ROWS`` learnings (lowered here) is held in a
    basis of their own and searched in stages: under filters, after another store adds a
    learning and forgets one (the delta quantized in the held basis), the answer is the SQL
    exact search's, and fewer rows than are held are multiplied in full."""
    monkeypatch.setattr(postgres.quantized, "STAGED_ROWS", 64)
    mine, other, truth = stores
    rng = np.random.default_rng(31)
    topics = rng.standard_normal((6, DIM))
    # vectors near a few directions, as sentence embeddings' energy is
    near = [rng.standard_normal(6) @ topics + 0.1 * _vector(rng) for _ in range(400)]
    corpus = [
        replace(m, embedding=v.astype(np.float32))
        for m, v in zip(_corpus(400, seed=31), near, strict=True)
    ]
    mine.write(corpus)
    held = _held(mine)
    rows = held._held["alice"]
    assert rows.basis is not None and len(rows.ids) >= 64
    multiplied: list[int] = []
    original = postgres.quantized._gathered
    last = DIM - postgres.quantized.STAGES[-1]

    def counted(block: Any, rows: Any, query: Any) -> Any:
        if block.shape[1] == last:  # the rows multiplied in full
            multiplied.append(len(rows))
        return original(block, rows, query)

    monkeypatch.setattr(postgres.quantized, "_gathered", counted)
    flt = TYPED.update(include_muted=False, include_superseded=False)
    for i in range(5):
        query = corpus[2 * i].embedding + 0.05 * _vector(rng)
        for f in (TYPED, flt, TYPED.update(project="app")):
            _same(mine.search("alice", query, 10, f), truth.search("alice", query, 10, f))
    assert 0 < sum(multiplied) / 15 < len(rows.ids)
    query = corpus[10].embedding
    new = mem("new", vector=query + 0.01 * _vector(rng), kind=Kind.DECISION)
    other.write([new], deletes=[next(m for m in corpus if m.id == corpus[10].id)])
    found = mine.search("alice", query, 10, TYPED)
    assert found[0][0].id == "new" and corpus[10].id not in {m.id for m, _ in found}
    _same(found, truth.search("alice", query, 10, TYPED))
    assert held._held["alice"].basis is rows.basis  # the delta in the same basis
