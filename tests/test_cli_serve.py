"""``engrain serve`` hands uvicorn one app over one engine, with onnxruntime's thread
spinning off unless the user set it (many concurrent calls share the cores)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

uvicorn = pytest.importorskip("uvicorn")

from click.testing import CliRunner  # noqa: E402

from engrain.cli import serve  # noqa: E402
from engrain.cli.app import cli  # noqa: E402


def _serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def run(app: Any, **kwargs: Any) -> None:
        seen["engine"] = app.state.engine
        seen["kwargs"] = kwargs

    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.setattr(serve, "listenable", lambda host, port: None)  # nothing binds here
    # serve sets a default in os.environ: give it a copy, so nothing leaks into other tests
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setenv("ENGRAIN_EMBEDDER", "hash")
    result = CliRunner().invoke(
        cli, ["serve", "--url", f"sqlite:///{tmp_path / 'serve.db'}", *args],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    seen["engine"].close()
    return seen


def test_serve_runs_one_engine_without_spinning_on_loopback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ENGRAIN_ONNX_SPINNING", raising=False)
    seen = _serve(monkeypatch, tmp_path, "--port", "8499")
    assert seen["engine"].settings.onnx_spinning is False
    assert seen["kwargs"]["host"] == "127.0.0.1"
    assert seen["kwargs"]["port"] == 8499


def test_a_users_spinning_setting_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ENGRAIN_ONNX_SPINNING", "true")
    assert _serve(monkeypatch, tmp_path)["engine"].settings.onnx_spinning is True


def test_workers_get_a_minute_to_answer_the_supervisors_health_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """uvicorn's 5 s default killed workers still starting on a busy machine, in a loop."""
    seen: dict[str, Any] = {}

    def run(app: Any, **kwargs: Any) -> None:
        seen["app"], seen["kwargs"] = app, kwargs

    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.setattr(serve, "listenable", lambda host, port: None)
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setenv("ENGRAIN_EMBEDDER", "hash")
    result = CliRunner().invoke(
        cli, ["serve", "--url", f"sqlite:///{tmp_path / 'serve.db'}", "--workers", "2"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen["app"] == "engrain.server.app:from_environment"
    assert seen["kwargs"]["workers"] == 2
    assert seen["kwargs"]["timeout_worker_healthcheck"] == serve.WORKER_HEALTHCHECK_S == 60


def test_an_older_uvicorn_without_the_setting_gets_none() -> None:
    def config(app: Any, workers: int = 1) -> None: ...

    assert serve._supervision(config) == {}
    assert serve._supervision(uvicorn.Config) == {"timeout_worker_healthcheck": 60}


@pytest.mark.parametrize("where", ["taken", "256.1.1.1"])
def test_an_address_nothing_can_listen_on_is_one_line_before_the_store_opens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    """A port in use or a host that does not resolve: ``error: cannot listen on …`` (exit
    3) before the model loads or the store is created; uvicorn said it after start-up, as
    log lines around an ERROR (session 24, h3)."""
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setenv("ENGRAIN_EMBEDDER", "hash")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        host, port = ("127.0.0.1", taken.getsockname()[1]) if where == "taken" else (where, 8420)
        db = tmp_path / "serve.db"
        result = CliRunner().invoke(
            cli, ["serve", "--url", f"sqlite:///{db}", "--host", host, "--port", str(port)],
            catch_exceptions=False,
        )  # fmt: skip
    assert result.exit_code == 3
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: cannot listen on {host}:{port}: "), line
    assert line.endswith(" (--host, --port)") and "while attempting" not in line
    assert not db.exists()
