"""The proxy's added latency: a chat completion through engrain minus the same request
straight to the upstream, for one user with 10,000 memories.

    python bench/proxy.py --out bench/results/proxy.json [--memories 10000] [--queries 200]

The upstream is a fake OpenAI-compatible endpoint in its own process (canned answers,
instantly, streamed one word per SSE chunk when asked), so the difference is engrain's work
alone: authentication, ``context()`` with the real all-MiniLM-L6-v2 on a SQLite store of
N memories (the corpus and cached vectors of ``bench/latency.py``), the injection, the
extra hop, and the relay of the reply. engrain runs in this process under uvicorn on
loopback with recording on (its default), so each exchange is also embedded and written in
the background, as in real use. For each distinct question the direct request and the
proxied one are sent back to back (their order alternating); the headline is the
percentiles of those per-pair differences, for the whole non-streamed reply and for the
time to the first streamed chunk.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import common

TARGETS = {"added_p95_ms": 25.0}
USER = "bench-user"
SYSTEM = "You are a helpful assistant. Answer in two sentences."


def answer(question: str) -> str:
    """The fake model's reply: about the question, so each exchange is a new memory (one
    canned text would make every recording a merge into the last)."""
    return f"Noted. On {question.rstrip('?.')}: I would check that first."


def serve_upstream(port: int) -> None:
    """The fake upstream (run in a child process): chat completions and a model list."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def events(model: str, text: str) -> AsyncIterator[bytes]:
        for i, word in enumerate(text.split(" ")):
            delta = {"content": word if i == 0 else " " + word}
            chunk = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 0,
                     "model": model, "choices": [{"index": 0, "delta": delta}]}  # fmt: skip
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        text = answer(body["messages"][-1]["content"])
        if body.get("stream"):
            return StreamingResponse(events(body["model"], text), media_type="text/event-stream")
        return JSONResponse({"id": "chatcmpl-b", "object": "chat.completion", "created": 0,
                             "model": body["model"], "choices": [{"index": 0,
                             "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}]})  # fmt: skip

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                            Route("/v1/models", models)])  # fmt: skip
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def free_port() -> int:
    """A loopback port free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_in_thread(app: Any) -> tuple[str, Callable[[], None]]:
    """``app`` under uvicorn in a daemon thread on a free loopback port (Nagle off, as
    uvicorn itself sets it when given a host and port); its URL and a stop function."""
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(30)
        sock.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}", stop


def wait_until_up(client: Any, url: str) -> None:
    """Poll the upstream's model list until it answers (at most 30 s)."""
    import httpx

    for _ in range(600):
        try:
            if client.get(f"{url}/models").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("the fake upstream did not start")


def timed_plain(client: Any, url: str, body: dict[str, Any], headers: dict[str, str]
                ) -> tuple[float, str]:  # fmt: skip
    """Milliseconds for a whole non-streamed reply, and the proxy's memory header."""
    start = time.perf_counter()
    reply = client.post(f"{url}/chat/completions", json=body, headers=headers)
    reply.read()
    elapsed = (time.perf_counter() - start) * 1000.0
    reply.raise_for_status()
    return elapsed, reply.headers.get("x-engrain-memory", "")


def timed_first_chunk(client: Any, url: str, body: dict[str, Any], headers: dict[str, str]
                      ) -> tuple[float, str]:  # fmt: skip
    """Milliseconds to the first chunk of a streamed reply (the rest is read, untimed)."""
    start = time.perf_counter()
    with client.stream("POST", f"{url}/chat/completions", json={**body, "stream": True},
                       headers=headers) as reply:  # fmt: skip
        reply.raise_for_status()
        chunks = reply.iter_bytes()
        next(chunks)
        elapsed = (time.perf_counter() - start) * 1000.0
        for _ in chunks:
            pass
    return elapsed, reply.headers.get("x-engrain-memory", "")


def measure(
    client: Any,
    direct: str,
    proxied: str,
    key: str,
    queries: Sequence[str],
    stream: bool,
    settle: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Direct and proxied times for each query, back to back in alternating order;
    ``settle`` (untimed) after each pair."""
    timer = timed_first_chunk if stream else timed_plain
    plain: list[float] = []
    through: list[float] = []
    memory: dict[str, int] = {}
    for i, query in enumerate(queries):
        body = {"model": "gpt-4o", "messages": [{"role": "system", "content": SYSTEM},
                                                {"role": "user", "content": query}]}  # fmt: skip
        auth = {"Authorization": f"Bearer {key}"}
        if i % 2:
            through_ms, used = timer(client, proxied, body, auth)
            plain_ms, _ = timer(client, direct, body, {})
        else:
            plain_ms, _ = timer(client, direct, body, {})
            through_ms, used = timer(client, proxied, body, auth)
        plain.append(plain_ms)
        through.append(through_ms)
        memory[used] = memory.get(used, 0) + 1
        if settle is not None:
            settle()
    added = [t - p for t, p in zip(through, plain, strict=True)]
    return {"direct": common.summarize(plain), "proxied": common.summarize(through),
            "added": common.summarize(added), "memory": memory}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--memories", type=int, default=10_000, help="memories of the user")
    parser.add_argument("--queries", type=int, default=200, help="timed pairs per mode")
    parser.add_argument("--warmup", type=int, default=10, help="untimed pairs first")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rushed", type=int, default=100,
                        help="pairs sent back to back, each while the previous exchange is "
                             "still being recorded (the worst case)")  # fmt: skip
    parser.add_argument("--no-record", action="store_true",
                        help="turn the proxy's background recording off")  # fmt: skip
    args = parser.parse_args(argv)
    if args.memories < 1 or args.queries < 1 or args.warmup < 1 or args.rushed < 1:
        parser.error("--memories, --queries, --warmup and --rushed must be positive")

    port = free_port()  # the upstream's process first, before this one loads the model
    upstream = multiprocessing.get_context("spawn").Process(target=serve_upstream,
                                                            args=(port,), daemon=True)  # fmt: skip
    upstream.start()
    try:
        report = run(args, f"http://127.0.0.1:{port}/v1")
    finally:
        upstream.terminate()
        upstream.join(10)
    common.write_json(args.out, report)
    print_table(report)
    return 0


def run(args: argparse.Namespace, direct: str) -> dict[str, Any]:
    """Build the user's memories, serve the proxy, time both modes."""
    import httpx

    from engrain.embed.minilm import MiniLMEmbedder
    from engrain.keys import KeyRing
    from engrain.server import create_app
    from engrain.server.proxy import ProxyConfig

    embedder = MiniLMEmbedder()
    notes = common.make_notes(args.memories, seed=args.seed)
    vectors, _, from_cache = common.embed_corpus(
        embedder, [n.text for n in notes],
        cache_dir=Path(tempfile.gettempdir()) / "engrain-bench")  # fmt: skip
    pool = common.make_queries(args.warmup * 2 + args.queries * 2 + args.rushed,
                               seed=args.seed + 1)  # fmt: skip
    warm, pool = pool[: args.warmup * 2], pool[args.warmup * 2 :]
    with tempfile.TemporaryDirectory(prefix="engrain-proxy-") as tmp:
        engine = common.open_engine(Path(tmp), embedder=embedder)
        with engine:
            memories = common.make_memories(notes, vectors, USER)
            for offset in range(0, len(memories), 2000):
                engine.store.write(memories[offset : offset + 2000])
            keys = KeyRing(engine.store)
            key = keys.create([USER])[0]
            config = ProxyConfig(direct, "sk-bench", record=not args.no_record)
            app = create_app(engine, keys, proxy=config)
            recorder = app.state.proxy.recorder

            def settle() -> None:  # the recording, then the engine's follow-up work
                recorder.drain()
                engine.wait()

            url, stop = serve_in_thread(app)
            proxied = url + "/v1"
            n = args.queries
            try:
                with httpx.Client(timeout=60) as client:
                    wait_until_up(client, direct)
                    measure(client, direct, proxied, key, warm[: args.warmup], False, settle)
                    measure(client, direct, proxied, key, warm[args.warmup :], True, settle)
                    plain = measure(client, direct, proxied, key, pool[:n], False, settle)
                    first = measure(client, direct, proxied, key, pool[n : 2 * n], True, settle)
                    rushed = measure(client, direct, proxied, key, pool[2 * n :], False)
                    settle()
            finally:
                stop()
            quiet = ProxyConfig(direct, "sk-bench", record=False)
            url, stop = serve_in_thread(create_app(engine, keys, proxy=quiet))
            try:
                with httpx.Client(timeout=60) as client:
                    norec = {"non_streaming": measure(client, direct, url + "/v1", key,
                                                      pool[:n], False),
                             "streaming_first_chunk": measure(client, direct, url + "/v1", key,
                                                              pool[n : 2 * n], True)}  # fmt: skip
            finally:
                stop()
            recorded = engine.store.count(USER) - len(memories)
    return {
        "memories": args.memories,
        "queries": args.queries,
        "non_streaming": plain,
        "streaming_first_chunk": first,
        "back_to_back": rushed,
        "without_recording": norec,
        "targets": TARGETS,
        "setup": {
            "store": "sqlite",
            "embedder": embedder.model_id,
            "model": "gpt-4o (tier 3)",
            "recording": not args.no_record,
            "exchanges_recorded": recorded,
            "exchanges_sent": args.warmup * 2 + 2 * args.queries + args.rushed,
            "vectors_from_cache": from_cache,
            "upstream": "fake, separate process, instant",
        },
        "machine": common.machine_info(),
    }


def print_table(report: dict[str, Any]) -> None:
    """The headline table, for a terminal."""
    target = report["targets"]["added_p95_ms"]
    print(f"\nproxy overhead, {report['memories']:,} memories, {report['queries']} pairs "
          f"per mode (target: added p95 ≤ {target:g} ms)")  # fmt: skip
    print(f"{'mode':<24} {'direct p50':>10} {'proxied p50':>11} {'added p50':>10} "
          f"{'added p95':>10}  verdict")  # fmt: skip
    for name, title in (("non_streaming", "whole reply"),
                        ("streaming_first_chunk", "streamed, first chunk"),
                        ("back_to_back", "whole reply, no pause")):  # fmt: skip
        row = report[name]
        verdict = "meets" if row["added"]["p95_ms"] <= target else "misses"
        direct, proxied, added = row["direct"], row["proxied"], row["added"]
        print(f"{title:<24} {direct['p50_ms']:>10.1f} {proxied['p50_ms']:>11.1f} "
              f"{added['p50_ms']:>10.1f} {added['p95_ms']:>10.1f}  {verdict}")  # fmt: skip
    for name, title in (("non_streaming", "whole reply"),
                        ("streaming_first_chunk", "streamed, first chunk")):  # fmt: skip
        added = report["without_recording"][name]["added"]
        print(f"{'(no recording) ' + title:<37} {added['p50_ms']:>10.1f} "
              f"{added['p95_ms']:>10.1f}")  # fmt: skip
    machine = report["machine"]
    print(f"{machine['cores']} cores, load average {machine.get('load_average_1m', '?')}")


if __name__ == "__main__":
    sys.exit(main())
