"""``bench/latency.py``'s own machinery: the derived vectors of its 1,000,000-memory corpus
(the model's vectors of 100,000 texts and noisy copies of them, the rule of the PostgreSQL
corpus) and the CPU summary it reports beside wall-clock latency."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import latency  # noqa: E402

DIM = 384


def _source(n: int = 50, seed: int = 3) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_derive_keeps_the_source_then_adds_noisy_unit_copies() -> None:
    source = _source()
    out = latency.derive(source, 230, seed=11)
    assert out.shape == (230, DIM) and out.dtype == np.float32
    assert np.array_equal(out[:50], source)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    # row i copies source[i % 50]: noise of norm 0.5 leaves a cosine of ~1/sqrt(1.25) = 0.89
    cosines = np.einsum("ij,ij->i", out[50:], source[np.arange(50, 230) % 50])
    assert cosines.min() > 0.8 and cosines.max() < 0.97
    assert abs(float(cosines.mean()) - 1 / np.sqrt(1.25)) < 0.02
    # and it is nearer its own source than any other
    assert np.array_equal((out[50:] @ source.T).argmax(axis=1), np.arange(50, 230) % 50)


def test_derive_is_deterministic_and_seeded() -> None:
    source = _source()
    first, again = latency.derive(source, 120, seed=11), latency.derive(source, 120, seed=11)
    assert np.array_equal(first, again)
    other = latency.derive(source, 120, seed=12)
    assert np.array_equal(other[:50], first[:50]) and not np.allclose(other[50:], first[50:])


def test_derive_within_the_source_is_its_rows() -> None:
    source = _source()
    out = latency.derive(source, 30, seed=11)
    assert out.shape == (30, DIM) and np.array_equal(out, source[:30])
    assert out.flags.c_contiguous


def test_derive_is_the_postgres_corpus_rule() -> None:
    pytest.importorskip("psycopg")
    import pg_scale

    source = _source()
    assert np.array_equal(latency.derive(source, 180, seed=11),
                          pg_scale.derived_vectors(source, 180, 11))  # fmt: skip


def test_derived_vectors_need_a_vectors_file() -> None:
    with pytest.raises(SystemExit) as exited:
        latency.main(["--derived-vectors", "--sizes", "10"])
    assert exited.value.code == 2


def test_cpu_summary_flat_keys() -> None:
    summary = latency.cpu_summary({"thread": [1.0, 2.0, 3.0, 10.0], "process": []})
    assert set(summary) == {"cpu_thread_p50_ms", "cpu_thread_p95_ms", "cpu_thread_mean_ms"}
    assert summary["cpu_thread_mean_ms"] == 4.0
    assert 2.0 <= summary["cpu_thread_p50_ms"] <= 3.0 and summary["cpu_thread_p95_ms"] > 3.0


def test_median_of_rounds_takes_cpu_and_load_key_by_key() -> None:
    rounds = [
        {"latency": {"p95_ms": p95}, "cpu_thread_p95_ms": cpu, "load_1m_end": load}
        for p95, cpu, load in ((10.0, 4.0, 1.0), (30.0, 8.0, 5.0), (20.0, 6.0, 3.0))
    ]
    out = latency._median_of(rounds)
    assert (out["p95_ms"], out["cpu_thread_p95_ms"], out["load_1m_end"]) == (20.0, 6.0, 3.0)
    assert len(out["rounds"]) == 3


def test_lazy_corpus_is_made_once_and_only_when_read() -> None:
    made: list[int] = []

    def make() -> list[int]:
        made.append(1)
        return [10, 20, 30]

    lazy = latency.Lazy(3, make)
    assert len(lazy) == 3 and not lazy.made and made == []
    assert lazy[1] == 20 and lazy[:2] == [10, 20] and list(lazy) == [10, 20, 30]
    assert lazy.made and made == [1]


def test_the_verdict_uses_the_issues_p95_target_for_backend_and_size() -> None:
    assert latency.p95_target("sqlite", 1_000) == latency.p95_target("postgres", 10_000) == 20.0
    assert latency.p95_target("sqlite", 100_000) == 15.0
    assert latency.p95_target("sqlite", 1_000_000) == 40.0
    assert latency.p95_target("postgres", 100_000) == 30.0
    assert latency.p95_target("postgres", 1_000_000) == 60.0
    assert latency.p95_target("chroma", 100_000) is None
    assert latency.p95_target("sqlite", 50_000) is None


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's /proc only")
def test_the_rss_peak_is_reset_so_the_close_is_measured_without_the_recall() -> None:
    block = np.ones(256 * 1024 * 1024 // 8)  # 256 MB made resident, then freed
    del block
    latency.heap.release()
    before = latency.rss_peak_mb()
    latency.reset_rss_peak()
    after = latency.rss_peak_mb()
    assert before - after > 200.0
    assert after <= latency.rss_mb() + 50.0


def _timed(query: str, budget: int, thread: float, block: str = "b") -> dict[str, object]:
    return {"query": query, "wall_ms": 2 * thread, "thread_ms": thread,
            "process_ms": thread + 1.0, "budget": budget, "block": block}  # fmt: skip


def test_deep_calls_are_those_whose_budget_deepens_the_pool() -> None:
    """A 2,000-token call walks ``2000 // 40 = 50`` matches, the ordinary pool: shallow; a
    3,000-token one walks 75: deep."""
    calls = [_timed("a", 500, 10.0), _timed("b", 2000, 12.0), _timed("c", 2040, 30.0),
             _timed("d", 3000, 20.0), _timed("e", 7500, 40.0)]  # fmt: skip
    out = latency.depth_summary(calls)
    assert (out["deep_calls"], out["shallow_calls"]) == (3, 2)
    assert out["deep_thread_p50_ms"] == 30.0 and out["shallow_thread_p50_ms"] == 11.0
    assert out["deep_wall_p50_ms"] == 60.0 and out["shallow_process_p95_ms"] > 12.0


def test_blocks_differing_counts_queries_whose_block_changed_in_any_round() -> None:
    base = [{"blocks": {"a": "1", "b": "2", "c": "3"}}, {"blocks": {"a": "1", "b": "2", "c": "3"}}]
    same = [{"blocks": {"a": "1", "b": "2", "c": "3"}}] * 2
    assert latency._blocks_differing(same, base) == 0
    one = [{"blocks": {"a": "1", "b": "9", "c": "3"}}, {"blocks": {"a": "1", "b": "2", "c": "3"}}]
    assert latency._blocks_differing(one, base) == 1
    missing = [{"blocks": {"a": "1", "b": "2"}}] * 2
    assert latency._blocks_differing(missing, base) == 1
    out = latency._median_of([{"latency": {"p95_ms": 1.0}, "blocks": {"a": "1"}}] * 2)
    assert "blocks" not in out and all("blocks" not in r for r in out["rounds"])


def test_the_probe_counts_each_calls_collections_by_generation(tmp_path: Path) -> None:
    """A collection run while a call is open is counted for that call, under its
    generation, with its CPU; one after the probe is closed is not."""
    import gc

    from engrain import Engine, Settings
    from engrain.embed import HashEmbedder
    from engrain.store import MemoryStore

    engine = Engine(settings=Settings(data_dir=tmp_path, embedder="hash"),
                    store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip
    with latency.CallProbe(engine) as probe:
        probe.begin()
        gc.collect(0)
        gc.collect(1)
        gc.collect(1)
        gc.collect(2)
        seen = dict(probe.seen)
        probe.begin()
        assert probe.seen["gc0"] + probe.seen["gc1"] + probe.seen["gc2"] == 0
    gc.collect(1)
    assert (seen["gc0"], seen["gc1"], seen["gc2"]) == (1, 2, 1) and seen["gc_ms"] > 0.0
    assert probe.seen["gc1"] == 0 and latency.CallProbe not in map(type, gc.callbacks)


def test_the_probe_times_the_counted_uses_of_each_timed_call(tmp_path: Path) -> None:
    """``time_queries`` with ``calls`` reports each call's counted uses' write (the store's
    ``record_uses``, wrapped only while it runs) and its collections."""
    from engrain import Engine, Settings
    from engrain.embed import HashEmbedder
    from engrain.store import MemoryStore

    store = MemoryStore()
    engine = Engine(settings=Settings(data_dir=tmp_path, embedder="hash"),
                    store=store, embedder=HashEmbedder())  # fmt: skip
    for text in ("the deploy script runs on Fridays", "Ana prefers tea to coffee"):
        engine.remember(text, user_id=latency.USER)
    written: list[int] = []
    original = store.record_uses

    def record_uses(*args: object, **kwargs: object) -> None:
        written.append(1)
        original(*args, **kwargs)  # type: ignore[arg-type]

    store.record_uses = record_uses  # type: ignore[method-assign]
    cpu: dict[str, list[float]] = {"thread": [], "process": []}
    calls: list[dict[str, object]] = []
    latency.time_queries(engine, ["when does the deploy script run?"] * 2, cpu, calls)
    assert len(calls) == 2 and len(written) == 2
    for call in calls:
        assert {"gc0", "gc1", "gc2", "gc_ms", "uses_ms", "uses_wall_ms"} <= call.keys()
        assert float(call["uses_wall_ms"]) > 0.0  # type: ignore[arg-type]
    assert store.record_uses is record_uses  # the probe's wrapper is gone


def test_probe_summary_splits_the_slowest_tenth_and_its_shares() -> None:
    """The slowest tenth by thread CPU (at least one call) against the rest: the
    collector's and the counted uses' mean milliseconds and their share of the call."""
    calls = []
    for i in range(20):
        call = _timed(f"q{i}", 3000, 10.0 + i)
        call.update(gc0=1, gc1=i % 2, gc2=0, gc_ms=float(i), uses_ms=1.0, uses_wall_ms=2.0)
        calls.append(call)
    out = latency.probe_summary("deep", calls)
    assert out["deep_gc0_per_call"] == 1.0 and out["deep_gc1_per_call"] == 0.5
    assert out["deep_tail_thread_mean_ms"] == 28.5  # the calls of 29 and 28 ms
    assert out["deep_tail_gc_mean_ms"] == 18.5 and out["deep_rest_gc_mean_ms"] == 8.5
    assert out["deep_tail_gc_share"] == round(18.5 / 28.5, 4)
    assert out["deep_tail_uses_wall_mean_ms"] == 2.0 and "deep_tail_uses_wall_share" not in out
    summary = latency.depth_summary(calls)
    assert summary["deep_gc_p50_ms"] == 9.5 and summary["deep_uses_p95_ms"] == 1.0
    assert latency.probe_summary("deep", [_timed("a", 3000, 1.0)]) == {}


def test_rounds_alternate_which_tree_goes_first() -> None:
    # a load rising through a run must not always meet the same tree second
    assert latency.round_order(4, baseline=True) == [
        "baseline",
        "served",
        "served",
        "baseline",
        "baseline",
        "served",
        "served",
        "baseline",
    ]
    assert latency.round_order(1, baseline=True) == ["baseline", "served"]
    assert latency.round_order(3, baseline=False) == ["served"] * 3
