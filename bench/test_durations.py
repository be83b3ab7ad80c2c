"""Where the test suite's time goes, and what the default run leaves to ``make test-all``.

Three commands:

``run``: the suite once per tree, trees alternating (``--tree base=/tmp/s29-base --tree
this=.``, ``--rounds`` times), each a ``pytest`` subprocess with this file loaded as a plugin
(``-p test_durations``): every test's setup / call / teardown wall and process CPU (every
thread of the process, so a server thread's work counts; child processes' CPU apart, once
they are waited for) and every fixture's setup, written raw per process (each xdist worker
writes its own). ``--args`` are pytest's (default: the CI run's marker expression).

``summary``: reads raw files and prints, per test file, the tests, wall and CPU (setup and
call apart), the costliest fixtures and tests, and the process's total wall and CPU
(``resource.getrusage``: the parent's and its children's).

``coverage``: collects the suite twice, with the default run's marker expression and with
``make test-all``'s, and lists every test module whose tests all leave the default run (it
exits 1 if there is one: no module may lose all its default coverage).

Usage:
``python bench/test_durations.py run --tree base=/tmp/s29-base --tree this=. --rounds 1
--out bench/results/test-durations.json [--args "-n 2"]``;
``python bench/test_durations.py summary RAW... [--out FILE]``;
``python bench/test_durations.py coverage``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

#: The marker expressions of ``make test`` (CI) and ``make test-all``.
DEFAULT_MARKERS = "not slow and not reliability"
ALL_MARKERS = "not reliability"

# ---------------------------------------------------------------------------------------
# The plugin (loaded into the measured pytest with ``-p test_durations``).

_tests: dict[str, dict[str, Any]] = {}
_fixtures: list[dict[str, Any]] = []
_started = (time.perf_counter(), time.process_time())


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _timed(item: pytest.Item, phase: str) -> Iterator[None]:
    wall, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
    yield
    row = _tests.setdefault(item.nodeid, {"markers": sorted({m.name for m in item.iter_markers()})})
    row[f"{phase}_wall"] = time.perf_counter() - wall
    row[f"{phase}_cpu"] = time.process_time() - cpu
    row[f"{phase}_child_cpu"] = _children_cpu() - children


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _timed(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Iterator[None]:
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    _fixtures.append({
        "name": fixturedef.argname, "scope": fixturedef.scope,
        "where": getattr(fixturedef, "baseid", ""),
        "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
    })  # fmt: skip


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("ENGRAIN_BENCH_TEST_DURATIONS")
    if not out:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    path = Path(f"{out}.{worker}" if worker else out)
    path.write_text(json.dumps({
        "worker": worker, "wall": time.perf_counter() - _started[0],
        "cpu": time.process_time() - _started[1], "children_cpu": _children_cpu(),
        "exitstatus": int(exitstatus), "tests": _tests, "fixtures": _fixtures,
    }), encoding="utf-8")  # fmt: skip


# ---------------------------------------------------------------------------------------
# The driver.


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def summarize(raws: Sequence[dict[str, Any]], top: int = 40) -> dict[str, Any]:
    """Per file, per fixture and per test, over the raw files of one run (its workers)."""
    files: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    tests: list[tuple[str, float, float]] = []
    for raw in raws:
        for nodeid, row in raw["tests"].items():
            f = files[_file_of(nodeid)]
            f["tests"] += 1
            for phase in ("setup", "call", "teardown"):
                f["wall"] += row.get(f"{phase}_wall", 0.0)
                f["cpu"] += row.get(f"{phase}_cpu", 0.0)
                f["child_cpu"] += row.get(f"{phase}_child_cpu", 0.0)
                f[f"{phase}_cpu"] += row.get(f"{phase}_cpu", 0.0)
            wall = sum(row.get(f"{p}_wall", 0.0) for p in ("setup", "call", "teardown"))
            cpu = sum(row.get(f"{p}_cpu", 0.0) for p in ("setup", "call", "teardown"))
            tests.append((nodeid, wall, cpu))
    fixtures: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for raw in raws:
        for fx in raw["fixtures"]:
            f = fixtures[(fx["name"], fx["scope"])]
            f["setups"] += 1
            f["wall"] += fx["wall"]
            f["cpu"] += fx["cpu"]
    by_file = sorted(files.items(), key=lambda kv: -kv[1]["cpu"])
    by_fixture = sorted(fixtures.items(), key=lambda kv: -kv[1]["cpu"])
    return {
        "processes": [
            {k: raw.get(k) for k in ("worker", "wall", "cpu", "children_cpu", "exitstatus")}
            for raw in raws
        ],
        "tests": len(tests),
        "test_wall": round(sum(t[1] for t in tests), 2),
        "test_cpu": round(sum(t[2] for t in tests), 2),
        "files": {
            name: {k: round(v, 3) if isinstance(v, float) else v for k, v in f.items()}
            for name, f in by_file
        },
        "fixtures": [
            {"name": name, "scope": scope, **{k: round(v, 3) for k, v in f.items()}}
            for (name, scope), f in by_fixture[:top]
        ],
        "slowest_tests": [
            {"test": t, "wall": round(w, 3), "cpu": round(c, 3)}
            for t, w, c in sorted(tests, key=lambda t: -t[2])[:top]
        ],
    }


def _print_summary(label: str, s: dict[str, Any], top: int = 30) -> None:
    procs = s["processes"]
    print(f"== {label}: {s['tests']} tests, tests' wall {s['test_wall']:.0f} s, "
          f"tests' CPU {s['test_cpu']:.0f} s; processes: " + ", ".join(
              f"{p['worker'] or 'main'} wall {p['wall']:.0f} cpu {p['cpu']:.0f} "
              f"children {p['children_cpu']:.0f}" for p in procs))  # fmt: skip
    print(f"{'file':60} {'tests':>6} {'wall':>8} {'cpu':>8} {'setup':>8} {'child':>7}")
    for name, f in list(s["files"].items())[:top]:
        print(f"{name:60} {f['tests']:6.0f} {f['wall']:8.1f} {f['cpu']:8.1f} "
              f"{f['setup_cpu']:8.1f} {f['child_cpu']:7.1f}")  # fmt: skip
    print(f"{'fixture (scope)':60} {'setups':>6} {'wall':>8} {'cpu':>8}")
    for fx in s["fixtures"][:15]:
        print(f"{fx['name'] + ' (' + fx['scope'] + ')':60} {fx['setups']:6.0f} "
              f"{fx['wall']:8.1f} {fx['cpu']:8.1f}")  # fmt: skip


def _read_raws(prefix: Path) -> list[dict[str, Any]]:
    paths = [prefix] if prefix.exists() else []
    paths += sorted(prefix.parent.glob(prefix.name + ".gw*"))
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


def run(trees: Sequence[tuple[str, Path]], rounds: int, args: str, scratch: Path) -> dict[str, Any]:
    """The suite once per tree and round, trees alternating; each run's summary and its
    whole process's wall and CPU (``getrusage`` of the children: pytest and its workers)."""
    scratch.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        for label, tree in trees:
            prefix = scratch / f"{label}-{r}.json"
            for old in [prefix, *prefix.parent.glob(prefix.name + ".gw*")]:
                old.unlink(missing_ok=True)
            env = {**os.environ, "ENGRAIN_BENCH_TEST_DURATIONS": str(prefix),
                   "PYTHONPATH": os.pathsep.join([str(tree / "src"), str(HERE)])}  # fmt: skip
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                       "test_durations", "-m", DEFAULT_MARKERS, *shlex.split(args)]  # fmt: skip
            before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
            after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - wall
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            load = os.getloadavg()[0]
            last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            summary = summarize(_read_raws(prefix))
            runs.append({"tree": label, "round": r, "wall": round(wall, 1), "cpu": round(cpu, 1),
                         "load_after": round(load, 1), "exit": done.returncode, "result": last,
                         "summary": summary})  # fmt: skip
            print(f"{label} round {r}: wall {wall:.0f} s, CPU {cpu:.0f} s, load {load:.1f}: {last}")
            _print_summary(f"{label} round {r}", summary, top=15)
    return {"args": args, "markers": DEFAULT_MARKERS, "runs": runs}


def _collected(markers: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", markers],
        cwd=REPO, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    return [line for line in done.stdout.splitlines() if "::" in line]


def coverage() -> dict[str, Any]:
    """Every test module's tests in the default run and in ``make test-all``; the modules
    that would have none in the default run."""
    default: dict[str, int] = defaultdict(int)
    everything: dict[str, int] = defaultdict(int)
    for nodeid in _collected(DEFAULT_MARKERS):
        default[_file_of(nodeid)] += 1
    for nodeid in _collected(ALL_MARKERS):
        everything[_file_of(nodeid)] += 1
    modules = {
        name: {"default": default.get(name, 0), "all": n} for name, n in sorted(everything.items())
    }
    uncovered = [name for name, m in modules.items() if m["default"] == 0]
    reduced = {name: m for name, m in modules.items() if 0 < m["default"] < m["all"]}
    return {
        "default_tests": sum(default.values()),
        "all_tests": sum(everything.values()),
        "modules": len(modules),
        "modules_without_default_tests": uncovered,
        "modules_with_part_in_default": reduced,
    }


def main(argv: Sequence[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    from common import write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("--tree", action="append", required=True, help="label=path")
    p_run.add_argument("--rounds", type=int, default=1)
    p_run.add_argument("--args", default="", help="more pytest arguments, as one string")
    p_run.add_argument("--scratch", type=Path, default=Path("/tmp/engrain-test-durations"))
    p_run.add_argument("--out", type=Path)
    p_sum = sub.add_parser("summary")
    p_sum.add_argument("raw", nargs="+", type=Path, help="raw file prefixes (workers beside)")
    p_sum.add_argument("--out", type=Path)
    p_cov = sub.add_parser("coverage")
    p_cov.add_argument("--out", type=Path)
    a = parser.parse_args(argv)
    if a.command == "run":
        trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve()) for t in a.tree]
        write_json(a.out, run(trees, a.rounds, a.args, a.scratch))
        return 0
    if a.command == "summary":
        summaries = {str(p): summarize(_read_raws(p)) for p in a.raw}
        for label, s in summaries.items():
            _print_summary(label, s)
        write_json(a.out, {"summaries": summaries})
        return 0
    report = coverage()
    print(f"default run {report['default_tests']} tests, test-all {report['all_tests']}, "
          f"{report['modules']} modules")  # fmt: skip
    for name, m in report["modules_with_part_in_default"].items():
        print(f"  {name}: {m['default']} of {m['all']} in the default run")
    for name in report["modules_without_default_tests"]:
        print(f"  {name}: NO test in the default run")
    write_json(a.out, report)
    return 1 if report["modules_without_default_tests"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
