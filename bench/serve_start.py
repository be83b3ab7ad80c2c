"""What ``engrain serve`` spends before it answers, trees side by side.

    python bench/serve_start.py --tree base=/tmp/s25-base --tree new=. --rounds 7 \
        --workdir /tmp/h8-serve --out bench/results/serve-start-s25-h8.json

Per round, for each tree (the order alternating): a fresh data directory with one API key
(``engrain keys create``, not timed), then ``python -m engrain.cli serve`` on a free
loopback port with that tree's ``src`` first on ``PYTHONPATH``, as the README starts it.
The harness polls ``GET /readyz`` every 10 ms and then sends, in order, the README's
``POST /v1/context`` and one MCP ``tools/list`` at ``/mcp``. For each of the three it
records the wall time since the process started and the server process's CPU so far
(``/proc/<pid>/stat``, every thread): ``ready``, ``first_context`` (it loads the model)
and ``first_mcp``. Under load the wall times are the machine's; the CPU columns are not.

Then one process per tree (``--phases``) times in-process what ``serve`` does before
uvicorn starts, as the process's CPU: the interpreter's start, importing the CLI (the core
with it), importing the server, opening the engine (the store; the model loads on first
use) and building the app. Medians per tree.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

USER = "ada"
MESSAGE = "which port?"
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
STEPS = ("ready", "first_context", "first_mcp")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _cpu_s(pid: int) -> float:
    """The process's CPU so far (every thread: user + system), seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _request(port: int, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:  # fmt: skip
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        data = None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        connection.request(method, path, body=data, headers=sent)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def _env(tree: Path, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAIN_")}
    env["PYTHONPATH"] = str(tree / "src")
    env["ENGRAIN_DATA_DIR"] = str(data_dir)
    return env


def start_once(tree: Path, workdir: Path) -> dict[str, Any]:
    """One fresh ``engrain serve`` of ``tree``: wall and CPU at each step."""
    data_dir = workdir / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    env = _env(tree, data_dir)
    cli = [sys.executable, "-m", "engrain.cli"]
    secret = subprocess.run([*cli, "keys", "create", "--user", USER], env=env, check=True,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    port = _free_port()
    started = time.perf_counter()
    command = [*cli, "serve", "--port", str(port), "--log-level", "warning"]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    row: dict[str, Any] = {"load_1m": round(os.getloadavg()[0], 2)}
    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"serve on {tree} exited: {server.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                if _request(port, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.01)
        row["ready"] = (time.perf_counter() - started, _cpu_s(server.pid))
        auth = {"Authorization": f"Bearer {secret}"}
        status, _ = _request(port, "POST", "/v1/context", {"message": MESSAGE}, auth)
        assert status == 200, status
        row["first_context"] = (time.perf_counter() - started, _cpu_s(server.pid))
        accept = {**auth, "Accept": "application/json, text/event-stream"}
        status, body = _request(port, "POST", "/mcp", TOOLS_LIST, accept)
        assert status == 200 and json.loads(body)["result"]["tools"], status
        row["first_mcp"] = (time.perf_counter() - started, _cpu_s(server.pid))
    finally:
        server.terminate()
        server.wait(timeout=60)
    out = {"load_1m": row["load_1m"]}
    for step in STEPS:
        out[f"{step}_wall_s"] = round(row[step][0], 3)
        out[f"{step}_cpu_s"] = round(row[step][1], 3)
    return out


def phases(spec_path: str) -> None:
    """In the tree on ``PYTHONPATH``: the process's CPU of each step ``serve`` takes before
    uvicorn starts, milliseconds; printed as one JSON line."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    spent: dict[str, Any] = {"python_ms": round(1000 * time.process_time(), 1)}
    last = time.process_time()

    def mark(step: str) -> None:
        nonlocal last
        now = time.process_time()
        spent[step] = round(1000 * (now - last), 1)
        last = now

    import engrain.cli.app  # noqa: F401

    mark("import_cli_ms")
    from engrain.server.app import serve_app
    from engrain.server.proxy import ProxyConfig

    mark("import_server_ms")
    from engrain.config import load_settings
    from engrain.engine import Engine

    engine = Engine(settings=load_settings({"data_dir": spec["data_dir"]}))
    mark("engine_ms")
    serve_app(engine, proxy=ProxyConfig.from_settings(engine.settings))
    mark("app_ms")
    spent["mcp_imported"] = "mcp" in sys.modules
    engine.close()
    print(json.dumps(spent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="name=path (repeat)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/engrain-serve-start"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--phases", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phases:
        phases(args.phases)
        return
    import common  # numpy and engrain: not in the --phases child, which counts imports

    trees = dict(item.split("=", 1) for item in args.tree)
    if len(trees) < 2 or args.rounds < 1:
        parser.error("two or more --tree and a positive --rounds are needed")
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    split: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    names = list(trees)
    for round_ in range(args.rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        for name in order:
            tree = Path(trees[name]).resolve()
            work = args.workdir / name
            work.mkdir(parents=True, exist_ok=True)
            rows[name].append(start_once(tree, work))
            split[name].append(common.run_child(
                __file__, "phases", {"data_dir": str(work / "phases")},
                [tree / "src", Path(__file__).parent]))  # fmt: skip
            print(name, round_, rows[name][-1], split[name][-1], flush=True)
    summary: dict[str, Any] = {}
    for name in names:
        keys = [k for k in rows[name][0] if k != "load_1m"]
        summary[name] = {k: round(statistics.median(r[k] for r in rows[name]), 3) for k in keys}
        summary[name].update({k: round(statistics.median(r[k] for r in split[name]), 1)
                              for k in split[name][0] if k != "mcp_imported"})  # fmt: skip
        summary[name]["mcp_imported_before_serving"] = split[name][0]["mcp_imported"]
    first, *others = names
    ratios = {other: {k: round(summary[other][k] / summary[first][k], 3)
                      for k in summary[first] if isinstance(summary[first][k], float)
                      and summary[first][k]} for other in others}  # fmt: skip
    for name in names:
        print(name, json.dumps(summary[name]))
    print("ratios against", first, json.dumps(ratios))
    common.write_json(args.out, {
        "benchmark": "serve_start", "rounds": args.rounds, "trees": trees,
        "median": summary, "ratio_to_first": ratios, "runs": rows, "phases": split,
        "machine": common.machine_info(),
    })  # fmt: skip


if __name__ == "__main__":
    main()
