"""A user's own domains (``domain_vocabulary``) tag memories stored without domains, and a
session summary keeps the domains of the memories it summarises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from engrain import Engine
from engrain.embed import HashEmbedder
from engrain.store import MemoryStore

from .conftest import make_settings

NOW = datetime(2026, 1, 15, 12, tzinfo=UTC)


def _engine(tmp_path: Path, **settings: object) -> Engine:
    return Engine(settings=make_settings(tmp_path, auto_compress=False, **settings),
                  store=MemoryStore(), embedder=HashEmbedder())  # fmt: skip


def test_remembered_text_is_tagged_with_the_users_domains(tmp_path: Path) -> None:
    engine = _engine(tmp_path, domain_vocabulary={"payments": ["invoice", "stripe"]})
    outcome = engine.remember("Invoices are finalised by a nightly job", "ada", now=NOW)
    assert "payments" in engine.get(outcome.memory_id or "", "ada").domains
    plain = _engine(tmp_path)
    other = plain.remember("Invoices are finalised by a nightly job", "ada", now=NOW)
    assert "payments" not in plain.get(other.memory_id or "", "ada").domains


def test_ingested_chunks_are_tagged_with_the_users_domains(tmp_path: Path) -> None:
    engine = _engine(tmp_path, domain_vocabulary={"experiments": ["a/b test", "holdout"]})
    report = engine.ingest("We ran the holdout for two weeks before the launch of the pricing "
                           "page, and Mara wrote up the results.", "ada", now=NOW)  # fmt: skip
    [stored] = report.stored
    assert "experiments" in engine.get(stored, "ada").domains


def test_a_session_summary_keeps_its_sources_domains(tmp_path: Path) -> None:
    engine = _engine(tmp_path, compression_threshold=1, sessions_to_compress=1)
    for day in range(3):
        turns = [{"speaker": "Ada", "text": f"Day {day}: the Stripe webhook retried {day} times "
                  "overnight and Bo increased the backoff."}]  # fmt: skip
        engine.ingest_conversation(turns, "ada", session_id=f"s{day}", domains=["payments"],
                                   now=NOW + timedelta(days=day))  # fmt: skip
    report = engine.compress("ada", force=True, now=NOW + timedelta(days=30))
    assert report.summaries
    for summary_id in report.summaries:
        assert engine.get(summary_id, "ada").domains == ("payments",)
