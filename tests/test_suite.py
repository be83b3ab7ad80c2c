"""The suite itself: what ``make test`` (CI) runs is a representative part of what
``make test-all`` runs, and the same in every worker process (docs/testing.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from .conftest import DESELECTED

ROOT = Path(__file__).resolve().parents[1]


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def test_no_test_id_holds_an_address_or_a_set_order(request: pytest.FixtureRequest) -> None:
    """xdist's workers each collect the suite and must find the same ids in the same order:
    an id printing an object's address (``<function <lambda> at 0x…>``) differs between
    processes and stops the run."""
    ids = [item.nodeid for item in request.session.items]
    assert [i for i in ids if re.search(r" at 0x[0-9a-f]+", i)] == []


def test_no_module_leaves_all_its_tests_to_test_all(request: pytest.FixtureRequest) -> None:
    """Every test module that ``-m`` thinned (``slow``) keeps a test in this run; a run
    without ``-m`` (or one file) has nothing to check."""
    left_out = request.config.stash.get(DESELECTED, [])
    kept = {_module(item.nodeid) for item in request.session.items}
    if kept == {_module(request.node.nodeid)}:
        pytest.skip("only this module was collected")
    reliability = {m for m in map(_module, left_out) if m.startswith("tests/reliability/")}
    assert {_module(i) for i in left_out} - kept - reliability == set()


def test_make_test_and_test_all_run_on_workers_with_xdist_installed() -> None:
    """``make test`` and ``make test-all`` pass the worker count to pytest, and the dev extra
    installs what reads it."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("test", "test-all"):
        recipe = re.search(rf"^{target}:.*\n\t(.*)$", makefile, re.MULTILINE)
        assert recipe is not None, target
        assert "$(PYTEST_WORKERS)" in recipe.group(1), target
    assert re.search(r"^PYTEST_WORKERS :=.*-n \$\(TEST_WORKERS\)", makefile, re.MULTILINE)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    dev = project["project"]["optional-dependencies"]["dev"]
    assert any(d.startswith("pytest-xdist") for d in dev)
