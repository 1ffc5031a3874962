"""Fuzzing /v1 with hypothesis: generated bodies and header sets against the whole gateway (its
lifespan entered, called in-process as an ASGI app), first in front of the fake OpenAI upstream
(`tests.fakes.openai_upstream`, on loopback), then in front of an upstream answering garbage
(`tests.fakes.garbage_upstream`). For every request: no 5xx but the documented 502/503/504, an
OpenAI-style JSON error for every failure, an answer within the configured timeouts, nothing
escaping the app; at the end, no traceback in the log and the gateway still serves.

`GW_FUZZ_EXAMPLES` / `GW_FUZZ_GARBAGE_EXAMPLES` change the counts (10,000 and 2,000); the run is
derandomised (the same examples each time) unless `GW_FUZZ_RANDOM=1`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gateway.app import create_app
from gateway.config import Settings, load_config
from tests.fakes.garbage_upstream import GarbageUpstream
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.gateway.http import fuzz_inputs
from tests.gateway.http.fuzz_inputs import KEY

EXAMPLES = int(os.environ.get("GW_FUZZ_EXAMPLES", "10000"))
GARBAGE_EXAMPLES = int(os.environ.get("GW_FUZZ_GARBAGE_EXAMPLES", "2000"))
TIMEOUTS = {"connect": 0.5, "first_byte": 0.25, "between_chunks": 0.25, "total": 2.0}
# The longest any one request may take: every attempt's first byte, then one stream to its total.
LIMIT_S = TIMEOUTS["total"] + 4 * TIMEOUTS["first_byte"] + 2.0
DOCUMENTED_5XX = {502, 503, 504}

FUZZ_SETTINGS = {
    "deadline": None,
    "database": None,
    "derandomize": os.environ.get("GW_FUZZ_RANDOM") != "1",
    "suppress_health_check": list(HealthCheck),
    "print_blob": True,
    "phases": [Phase.explicit, Phase.generate, Phase.shrink],  # no "explain": it reruns with tracing
}


# -- the gateway, driven in-process --------------------------------------------------


class Driver:
    """The app with its lifespan entered, on a loop of its own that the sync hypothesis tests
    drive; the upstream starts first (its port goes into the config)."""

    def __init__(self, upstream: Any, settings_for: Callable[[str], Settings]) -> None:
        self.runner = asyncio.Runner()
        self.upstream = upstream
        self._settings_for = settings_for
        self.stack = AsyncExitStack()
        self.app: Any = None
        self.state: dict[str, Any] = {}

    def start(self) -> Driver:
        self.runner.run(self._start())
        return self

    async def _start(self) -> None:
        await self.upstream.start()
        self.app = create_app(self._settings_for(self.upstream.url))
        self.state = dict(await self.stack.enter_async_context(self.app.router.lifespan_context(self.app)) or {})

    def stop(self) -> None:
        async def _stop() -> None:
            await self.stack.aclose()
            await self.upstream.stop()

        self.runner.run(_stop())
        self.runner.close()

    def call(self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
        return self.runner.run(self._call(method, path, headers, body))

    async def _call(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, dict[bytes, bytes], bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"fuzz"), *headers],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8080),
            "state": self.state.copy(),
        }
        sent = False
        start: dict[str, Any] = {}
        parts: list[bytes] = []
        done = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()  # the client stays until the answer is complete
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                if not message.get("more_body", False):
                    done.set()

        began = time.monotonic()
        try:
            async with asyncio.timeout(LIMIT_S):
                await self.app(scope, receive, send)
        except TimeoutError:
            raise AssertionError(f"no complete answer within {LIMIT_S} s ({method} {path})") from None
        finally:
            done.set()
        assert time.monotonic() - began <= LIMIT_S
        assert start, "the app returned without a response"
        return start["status"], dict(start.get("headers", [])), b"".join(parts)


class TracebackCatcher(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback" in record.getMessage():
            self.records.append(record)


@pytest.fixture
def tracebacks() -> Iterator[TracebackCatcher]:
    catcher = TracebackCatcher()
    root = logging.getLogger()
    root.addHandler(catcher)
    old = root.level
    root.setLevel(logging.INFO)
    yield catcher
    root.removeHandler(catcher)
    root.setLevel(old)


def check(status: int, headers: dict[bytes, bytes], body: bytes) -> None:
    assert status < 500 or status in DOCUMENTED_5XX, (status, body[:300])
    if status >= 400:
        error = orjson.loads(body)["error"]  # OpenAI-style JSON, whatever went wrong
        assert isinstance(error["message"], str) and isinstance(error["type"], str), body[:300]
    if b"retry-after" in headers:
        assert 0 <= int(headers[b"retry-after"]) <= 300, headers[b"retry-after"]


def no_tracebacks(catcher: TracebackCatcher) -> None:
    assert not catcher.records, "\n".join(logging.Formatter().format(r) for r in catcher.records[:3])


# Hypothesis draws bytes; `fuzz_inputs` decodes them into requests and garbage answers.
REQUEST_BYTES = st.binary(max_size=384)

# -- 1: generated requests, the fake upstream ---------------------------------------------


def fake_upstream_settings(url: str) -> Settings:
    def dep(model: str, upstream_model: str, provider: str = "a", **extra: Any) -> dict[str, Any]:
        return {"model": model, "provider": provider, "upstream_model": upstream_model, **extra}

    return load_config(
        environ={},
        server={"max_body_bytes": 16 * 1024},
        auth={"keys": [{"name": "fuzz", "key": KEY}]},
        timeouts=TIMEOUTS,
        retry={"backoff_base": 0.0, "backoff_max": 0.0, "max_retry_after": 0.0},
        routing={"keys": {"fuzz": {"rpm": 1_000_000, "tpm": 10**12}}},
        providers=[{"name": "a", "base_url": url}, {"name": "b", "base_url": url}],
        deployments=[
            dep("chat", "gpt-fake"),
            dep("chat", "gpt-fake-b", "b", routing={"tpm": 10**12}),
            dep("fallback", "x@status:500"),
            dep("fallback", "y", "b"),
            dep("all-fail", "x@reset"),
            dep("all-fail", "y@status:503", "b"),
            dep("rate-limited", "r@status:429;retry-after=inf"),
            dep("cut", "c@cut:1"),
            dep("cut", "e@error-event:1", "b"),
            dep("invalid", "i@invalid-json"),
            dep("embed", "embed-up", capabilities={"modes": ["embeddings"]}),
        ],
    )


def test_generated_requests_in_front_of_the_fake_upstream(tracebacks: TracebackCatcher) -> None:
    upstream = FakeOpenAIUpstream()
    driver = Driver(upstream, fake_upstream_settings).start()
    statuses: dict[int, int] = {}
    try:

        @settings(max_examples=EXAMPLES, **FUZZ_SETTINGS)
        @given(REQUEST_BYTES)
        def fuzz(data: bytes) -> None:
            status, headers, body = driver.call(*fuzz_inputs.request(data))
            statuses[status] = statuses.get(status, 0) + 1
            check(status, headers, body)
            if len(upstream.requests) > 1000:
                upstream.requests.clear()

        fuzz()
        still = driver.call(
            "POST", "/v1/chat/completions", [(b"authorization", f"Bearer {KEY}".encode())],
            orjson.dumps({"model": "chat", "messages": [{"role": "user", "content": "still there?"}]}),
        )
        assert still[0] == 200, still
    finally:
        driver.stop()
        print(f"statuses over {EXAMPLES} generated requests: {dict(sorted(statuses.items()))}")
    assert statuses.get(200, 0) > EXAMPLES // 50  # the generator reaches the upstream, not only the validator
    no_tracebacks(tracebacks)


# -- 2: an upstream that answers garbage ------------------------------------------------

def garbage_settings(url: str) -> Settings:
    return load_config(
        environ={},
        auth={"keys": [{"name": "fuzz", "key": KEY}]},
        timeouts=TIMEOUTS,
        retry={"backoff_base": 0.0, "backoff_max": 0.0, "max_retry_after": 0.0},
        routing={"keys": {"fuzz": {"rpm": 1_000_000, "tpm": 10**12}}},
        providers=[{"name": "g", "base_url": url}, {"name": "h", "base_url": url}],
        deployments=[
            {"model": "one", "provider": "g", "routing": {"tpm": 10**12}},
            {"model": "two", "provider": "g"},
            {"model": "two", "provider": "h"},
            {"model": "embed", "provider": "g", "capabilities": {"modes": ["embeddings"]}},
        ],
    )


def test_an_upstream_answering_garbage(tracebacks: TracebackCatcher) -> None:
    upstream = GarbageUpstream()
    driver = Driver(upstream, garbage_settings).start()
    auth = [(b"authorization", f"Bearer {KEY}".encode()), (b"content-type", b"application/json")]
    statuses: dict[int, int] = {}
    try:

        @settings(max_examples=GARBAGE_EXAMPLES, **FUZZ_SETTINGS)
        @given(REQUEST_BYTES)
        def fuzz(data: bytes) -> None:
            upstream.answer, path, body = fuzz_inputs.garbage_case(data, TIMEOUTS["first_byte"], TIMEOUTS["between_chunks"])
            status, headers, answer = driver.call("POST", path, auth, body)
            statuses[status] = statuses.get(status, 0) + 1
            check(status, headers, answer)

        fuzz()
        upstream.answer = None
        still = driver.call(
            "POST", "/v1/chat/completions", auth, orjson.dumps({"model": "one", "messages": [{"role": "user", "content": "ok?"}]})
        )
        assert still[0] == 200, still  # the gateway still serves (the endpoint may be blocked: fail-open tries it)
    finally:
        driver.stop()
        print(f"statuses over {GARBAGE_EXAMPLES} garbage answers: {dict(sorted(statuses.items()))}")
    no_tracebacks(tracebacks)
