"""The passive monitor inside a real gateway (uvicorn on loopback) over the fake OpenAI upstream:
tool calls corrupted at a rising rate make their endpoint SUSPECT, streamed or not; clean traffic
on another endpoint stays HEALTHY; `gateway_tool_calls_total` counts both. With persistence on,
the transition is stored (in the background) with its evidence."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import DatabaseConfig, load_config
from gateway.persistence import migrate
from gateway.persistence.engine import make_engine
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.probes.toolcalls.test_validator import WEATHER

ADMIN = {"authorization": "Bearer sk-admin-tools-0001"}
BAD, GOOD = "fake/corrupt", "fake/clean"


class RisingCorruption:
    """Breaks the calls of the upstream model "corrupt": none for a warm-up, then every 20th,
    then every 10th, then every 5th call (alternating bad JSON and an unknown name)."""

    def __init__(self, warm_up: int = 60) -> None:
        self.seen = itertools.count()
        self.warm_up = warm_up
        self.broken = 0

    def __call__(self, body: dict[str, Any]) -> str | None:
        if body.get("model") != "corrupt":
            return None
        i = next(self.seen) - self.warm_up
        period = 20 if i < 100 else 10 if i < 200 else 5
        if i < 0 or i % period:
            return None
        self.broken += 1
        return "bad_json" if self.broken % 2 else "unknown_name"


@pytest.fixture
def gateway() -> Iterator[tuple[str, RisingCorruption]]:
    loop = BackgroundLoop().start()
    corruption = RisingCorruption()
    upstream = FakeOpenAIUpstream(tool_fault=corruption)
    loop.call(upstream.start())
    settings = load_config(
        environ={"GW_AUTH__ADMIN_KEY": "sk-admin-tools-0001"},
        providers=[{"name": "fake", "base_url": upstream.url}],
        deployments=[
            {"model": "tools-bad", "provider": "fake", "upstream_model": "corrupt", "id": BAD},
            {"model": "tools-good", "provider": "fake", "upstream_model": "clean", "id": GOOD},
        ],
    )
    server = GatewayServer(create_app(settings), loop).start()
    try:
        yield server.root, corruption
    finally:
        server.stop()
        loop.call(upstream.stop())
        loop.stop()


def chat(client: httpx.Client, model: str, *, stream: bool, tools: bool = True) -> None:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "weather?"}], "stream": stream}
    if tools:
        body["tools"] = [WEATHER]
    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        resp.read()


def states(client: httpx.Client) -> dict[str, dict[str, Any]]:
    resp = client.get("/admin/api/health", headers=ADMIN)
    assert resp.status_code == 200
    return {row["endpoint"]: row for row in resp.json()["data"]}


def tool_counts(client: httpx.Client) -> dict[tuple[str, str], float]:
    text = client.get("/metrics").text
    found = re.findall(r'^gateway_tool_calls_total\{endpoint="([^"]+)",result="([^"]+)"\} (\S+)$', text, re.M)
    return {(ep, result): float(v) for ep, result, v in found}


def test_rising_corruption_raises_suspect_and_clean_traffic_stays_healthy(
    gateway: tuple[str, RisingCorruption],
) -> None:
    root, corruption = gateway
    with httpx.Client(base_url=root, timeout=10) as client:
        bad, good = BAD, GOOD
        sent = 0
        while states(client)[bad]["state"] == "healthy":
            assert sent < 400, "the rising error rate was never detected"
            stream = sent % 2 == 1  # half the traffic streams
            chat(client, "tools-bad", stream=stream)
            chat(client, "tools-good", stream=stream)
            chat(client, "tools-good", stream=stream, tools=False)  # no tools: never inspected
            sent += 1
        current = states(client)
        counts = tool_counts(client)
    assert current[bad]["state"] == "suspect" and current[bad]["source"] == "tool_monitor"
    assert current[good]["state"] == "healthy"
    assert corruption.broken >= 2
    assert sent > corruption.warm_up  # nothing alarmed on the clean warm-up
    assert counts[(good, "ok")] == sent and (good, "invalid_json") not in counts
    broken = counts.get((bad, "invalid_json"), 0) + counts.get((bad, "unknown_name"), 0)
    assert broken == corruption.broken
    assert counts[(bad, "ok")] == sent - corruption.broken



def broken_call(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Pa'}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    answer = {"id": "x", "object": "chat.completion", "model": body["model"],
              "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(answer))


def test_the_transition_is_stored_with_its_evidence(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    engine = make_engine(DatabaseConfig(url=url))
    migrate.upgrade(engine)
    engine.dispose()
    settings = load_config(
        environ={},
        auth={"admin_key": "sk-admin-tools-0001"},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p", "id": "p/m"}],
        database={"url": url},
        persistence={"enabled": True, "spill_path": str(tmp_path / "spill.jsonl"), "refresh_interval": 0.1},
    )
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER]}
    with TestClient(create_app(settings, client_factory=lambda: MockHTTPClient(broken_call))) as client:
        for _ in range(2):  # two bad responses in a row cross h = 5
            assert client.post("/v1/chat/completions", json=body).status_code == 200
        deadline = time.monotonic() + 5
        while not (rows := client.get("/admin/api/health/transitions", headers=ADMIN).json()["data"]):
            assert time.monotonic() < deadline, "the transition was never stored"
            time.sleep(0.05)
    (row,) = rows
    assert (row["endpoint_id"], row["from_state"], row["to_state"], row["source"]) == ("p/m", "healthy", "suspect", "tool_monitor")
    assert row["evidence"]["counts"] == {"invalid_json": 2} and row["evidence"]["bad_responses"] == 2
    assert "Pa" not in str(row["evidence"])  # counts only, never content
