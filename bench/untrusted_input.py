"""What untrusted input costs the gateway now (issue 16's schema, depth and `n` findings):

- a ReDoS `pattern` (`^(a+)+$`) checked with RE2, against Python's `re` on tiny inputs;
- the audit's 1.2 MB schema: how long until it is "unchecked" (measured, never compiled);
- the schema worker: a normal check's round trip, and a check killed at its deadline;
- /healthz latency through a real gateway while hostile schemas are sent (the scripted testbed
  in its own process is the upstream);
- the watcher that cancels a non-streaming request when its client leaves: CPU per request that
  ends within `WATCH_AFTER` (no watcher task is made for those; longer ones get one).

    .venv/bin/python bench/untrusted_input.py            # about a minute
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import orjson  # noqa: E402

from gateway.http.openai_routes import _until_disconnect  # noqa: E402
from probes.settings import ToolMonitorSettings  # noqa: E402
from probes.toolcalls.checker import ProcessChecker  # noqa: E402
from probes.toolcalls.validator import SchemaCache, ToolSpec, classify_response  # noqa: E402


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def request_for(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}]}


def response_for(arguments: str) -> dict[str, Any]:
    call = {"type": "function", "function": {"name": "f", "arguments": arguments}}
    return {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}


def redos() -> None:
    print("ReDoS pattern ^(a+)+$")
    for n in (18, 20, 22):
        started = time.perf_counter()
        re.search(r"^(a+)+$", "a" * n + "!")
        print(f"  Python re, {n} chars + '!': {ms(time.perf_counter() - started)}")
    spec = ToolSpec.from_request(request_for({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}))
    cache = SchemaCache(client=True)
    for n in (5_000, 100_000):
        resp = response_for(orjson.dumps({"s": "a" * n + "!"}).decode())
        times = []
        for _ in range(5):
            started = time.perf_counter()
            classify_response(resp, spec, cache)
            times.append(time.perf_counter() - started)
        print(f"  RE2 via the validator, {n} chars + '!': median {ms(statistics.median(times))}, max {ms(max(times))}")


def big_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {f"p{i:05d}": {"type": "string", "description": "x" * 40} for i in range(17_000)}}


def oversized() -> None:
    schema = big_schema()
    cache = SchemaCache(client=True)
    started = time.perf_counter()
    compiled = cache.get(schema)
    print(f"1.2 MB schema ({len(orjson.dumps(schema)):,} bytes): {compiled.unchecked!r} after {ms(time.perf_counter() - started)}")


def exponential(levels: int = 40) -> dict[str, Any]:
    defs: dict[str, Any] = {"a0": {"type": "integer"}}
    for i in range(1, levels + 1):
        defs[f"a{i}"] = {"anyOf": [{"$ref": f"#/$defs/a{i - 1}"}, {"$ref": f"#/$defs/a{i - 1}"}]}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": f"#/$defs/a{levels}"}}}


async def worker() -> None:
    settings = ToolMonitorSettings()
    checker = ProcessChecker(settings)
    ok_request = request_for({"type": "object", "properties": {"city": {"type": "string"}}})
    ok_response = response_for('{"city": "Paris"}')
    started = time.perf_counter()
    await checker.check(ok_response, ok_request)
    print(f"schema worker: first check (starts the worker) {ms(time.perf_counter() - started)}")
    times = []
    for _ in range(200):
        started = time.perf_counter()
        await checker.check(ok_response, ok_request)
        times.append(time.perf_counter() - started)
    times.sort()
    print(f"  a normal check's round trip: median {ms(times[100])}, p99 {ms(times[197])}")
    started = time.perf_counter()
    result = await checker.check(response_for('{"x": "s"}'), request_for(exponential()))
    print(f"  an exponential schema: {result} after {ms(time.perf_counter() - started)} (deadline {settings.check_timeout} s)")
    started = time.perf_counter()
    await checker.check(ok_response, ok_request)
    print(f"  the next check (a fresh worker): {ms(time.perf_counter() - started)}")
    await checker.aclose()


def healthz() -> None:
    from gateway.app import create_app
    from probes.testbed.endpoints import EndpointSpec
    from tests.fakes.servers import BackgroundLoop, GatewayServer
    from tests.probes.toolcalls import scripted_testbed
    from tests.probes.toolcalls.test_passive_gateway import KEYS, SilentSocket, gateway_settings, tool

    proc, root = scripted_testbed.start([EndpointSpec("honest"), EndpointSpec("corrupt")])
    loop = BackgroundLoop().start()
    server = GatewayServer(create_app(gateway_settings(root)), loop).start()
    silent = SilentSocket()
    hostile = [
        tool({"type": "object", "properties": {"city": {"$ref": silent.url}}}),
        tool({"type": "object", "properties": {"city": {"$ref": "file:///dev/zero"}}}),
        tool({"type": "object", "properties": {"s": {"type": "string", "enum": ["a" * 5000 + "!"], "pattern": "^(a+)+$"}}}),
        tool(exponential()),
    ]
    headers = {"authorization": f"Bearer {KEYS['team-a']}", "content-type": "application/json"}

    def body(tools: list[dict[str, Any]]) -> bytes:
        return orjson.dumps({"model": "tools-good", "messages": [{"role": "user", "content": "x"}], "tools": tools})

    def phase(label: str, bodies: list[bytes], rounds: int) -> None:
        latencies: list[float] = []
        done = threading.Event()

        def poll() -> None:
            with httpx.Client(base_url=server.root) as http:
                while not done.is_set():
                    started = time.perf_counter()
                    http.get("/healthz")
                    latencies.append(time.perf_counter() - started)
                    time.sleep(0.01)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        with httpx.Client(base_url=server.root, timeout=30) as client:
            for _ in range(rounds):
                for b in bodies:
                    client.post("/v1/chat/completions", content=b, headers=headers)
        time.sleep(1.5)  # the last checks finish (the exponential one at its deadline)
        done.set()
        poller.join(10)
        latencies.sort()
        print(f"/healthz during {label}: {len(latencies)} polls, median {ms(latencies[len(latencies) // 2])}, "
              f"p99 {ms(latencies[int(len(latencies) * 0.99)])}, max {ms(latencies[-1])}")

    try:
        with httpx.Client(base_url=server.root, timeout=30) as client:
            client.post("/v1/chat/completions", content=body(hostile[0]), headers=headers)
        time.sleep(1.0)
        phase("benign requests (the baseline)", [body(tool({"type": "object", "properties": {"city": {"type": "string"}}}))] * 4, 5)
        phase("hostile schemas ($ref to a silent socket, file://, ReDoS, exponential) x5", [body(t) for t in hostile], 5)
        print(f"  connections to the silent socket: {silent.connections()}")
        phase("a 1.2 MB schema x5 (parsing a body that size is the gateway's own cost)", [body(tool(big_schema()))], 5)
    finally:
        silent.close()
        server.stop()
        loop.stop()
        scripted_testbed.stop(proc)


async def watcher_cost(n: int = 20_000) -> None:
    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # a client that stays
        return {}

    async def work() -> int:
        return 1

    watched = ("with the disconnect watcher", lambda: _until_disconnect(receive, work()))
    for label, run in (("bare await", lambda: work()), watched):
        started = time.process_time()
        for _ in range(n):
            await run()
        await asyncio.sleep(0)
        print(f"  {label}: {(time.process_time() - started) / n * 1e6:.1f} µs CPU per request")


def main() -> None:
    redos()
    oversized()
    asyncio.run(worker())
    healthz()
    print("non-streaming requests:")
    asyncio.run(watcher_cost())


if __name__ == "__main__":
    main()
