"""The README's first screen does what it shows: its Python example, run as written (the
real model, a SQLite file), prints the remembered preference for the message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

README = Path(__file__).resolve().parents[1] / "README.md"


def first_python_example() -> str:
    """The first ```python block of the README."""
    found = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert found, "the README shows no Python example"
    return found.group(1)


def test_the_first_python_example_prints_the_remembered_preference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = first_python_example()
    assert "Engine()" in code  # the embedded default, as a new user runs it
    monkeypatch.setenv("ENGRAIN_DATA_DIR", str(tmp_path))
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # the README's own code
    printed = capsys.readouterr().out
    assert "<memory>" in printed and "I prefer tabs over spaces" in printed
    engine = namespace["engine"]
    engine.close()  # type: ignore[attr-defined]
