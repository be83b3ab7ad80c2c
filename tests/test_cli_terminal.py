"""The ``engrain`` command as a separate process: what only a real process shows, such as
argv bytes that are not UTF-8 and a terminal on stdin or stderr (a pseudo-terminal here)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX argv bytes and ptys")

NOTE = "Last Tuesday Maria moved the staging cluster to Frankfurt after the outage in Dublin."


@pytest.fixture
def engrain(tmp_path: Path) -> list[bytes]:
    """``python -m engrain.cli --url sqlite:///<tmp>/x.db`` as argv bytes."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    return [sys.executable.encode(), b"-m", b"engrain.cli", b"--url", url.encode()]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    drop = {"ENGRAIN_USER", "ENGRAIN_URL", "ENGRAIN_CONFIG"}
    return {
        **{k: v for k, v in os.environ.items() if k not in drop},
        "ENGRAIN_EMBEDDER": "hash",
        "ENGRAIN_DATA_DIR": str(tmp_path / "data"),
        "LC_ALL": "C.UTF-8",
    }


def run(
    argv: list[bytes], env: dict[str, str], input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, env=env, input=input, capture_output=True, timeout=120)


def exported(engrain: list[bytes], env: dict[str, str]) -> bytes:
    done = run([*engrain, b"export", b"--all-users"], env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def on_a_terminal(
    argv: list[bytes], env: dict[str, str], *, stdin: bytes | None = None
) -> tuple[int, bytes]:
    """Run with stdout and stderr on one pseudo-terminal (and stdin too, unless ``stdin``
    bytes are given): the exit code and everything the terminal received."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=secondary if stdin is None else subprocess.PIPE,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
    received = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        received += chunk
    os.close(primary)
    return proc.wait(timeout=120), received


def test_the_script_entry_point_is_main() -> None:
    [script] = entry_points(group="console_scripts", name="engrain")
    assert script.value == "engrain.cli:main"


def test_argv_bytes_that_are_not_utf8_exit_2_without_a_traceback(
    engrain: list[bytes], env: dict[str, str]
) -> None:
    for args in ([b"remember", b"caf\xe9"], [b"-u", b"b\xffb", b"remember", b"fine text"],
                 [b"ingest", b"\xed\xa0\x80 encoded surrogate"]):  # fmt: skip
        done = run([*engrain, *args], env)
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.decode().splitlines()
        assert line.startswith("error: argument ") and "is not valid UTF-8: b'" in line
        assert done.stdout == b""
    done = run([*engrain, b"remember", b"caf\xe9"], env)
    assert done.stderr == b"error: argument 4 is not valid UTF-8: b'caf\\xe9'\n"
    as_json = run([*engrain, b"--json", b"remember", b"caf\xe9"], env)
    assert json.loads(as_json.stderr)["error"] == "invalid_input"
    assert exported(engrain, env) == b""


def test_ingest_of_stdin_that_is_not_utf8_exits_2(
    engrain: list[bytes], env: dict[str, str]
) -> None:
    done = run([*engrain, b"ingest", b"-"], env, input=b"caf\xe9 au lait, every morning at nine")
    assert done.returncode == 2
    assert done.stderr == b"error: stdin is not valid UTF-8 (byte 0xe9 at offset 3)\n"
    assert exported(engrain, env) == b""


def test_ingest_without_text_does_not_wait_on_a_terminal(
    engrain: list[bytes], env: dict[str, str]
) -> None:
    code, received = on_a_terminal([*engrain, b"ingest"], env)
    assert code == 2
    assert b"missing TEXT" in received and b"Traceback" not in received
    assert exported(engrain, env) == b""


def test_import_progress_ends_its_line_before_the_summary(
    engrain: list[bytes], env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text(json.dumps({"type": "text", "text": NOTE}) + "\n")
    code, received = on_a_terminal([*engrain, b"import", str(path).encode()], env)
    assert code == 0, received
    before, summary = received.split(b"imported 1 record", 1)
    assert b"importing" in before  # the bar is there, on a terminal
    assert before.endswith(b"\n")  # and its line ended: the summary starts a line of its own
    assert summary.startswith(b": 0 memories restored, 1 stored")

    path.write_text(json.dumps({"type": "text", "text": NOTE}) + "\n" + '{"type": "video"}\n')
    code, received = on_a_terminal([*engrain, b"import", str(path).encode()], env)
    assert code == 2
    before, error = received.split(b"error: line 2: ", 1)
    assert b"importing" in before and before.endswith(b"\n")
    assert b"video" in error and b"Traceback" not in received

    piped = json.dumps({"type": "text", "text": NOTE}).encode()
    code, received = on_a_terminal([*engrain, b"--json", b"import", b"-"], env, stdin=piped)
    assert code == 0 and b"importing" not in received  # --json output has no bar
    assert json.loads(received)["records"] == 1
