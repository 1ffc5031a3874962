"""The assembled app in-process (Starlette's TestClient runs the lifespan) over `MockHTTPClient`:
the stages are wired together, and accounting sees what the upstream reported."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import load_config
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse

ADMIN = {"authorization": "Bearer sk-admin-0000000001"}
USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 100,
    "total_tokens": 1100,
    "prompt_tokens_details": {"cached_tokens": 800},
}


def answer(request: UpstreamRequest) -> MockResponse:
    body = orjson.loads(request.body)
    if not body.get("stream"):
        return MockResponse(
            200,
            {"content-type": "application/json"},
            orjson.dumps(
                {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [], "usage": USAGE}
            ),
        )
    events = [
        {
            "id": "x",
            "object": "chat.completion.chunk",
            "model": body["model"],
            "choices": [{"index": 0, "delta": {"content": "hi"}}],
            "usage": None,
        },
        {"id": "x", "object": "chat.completion.chunk", "model": body["model"], "choices": [], "usage": USAGE},
    ]
    chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
    return MockResponse(200, {"content-type": "text/event-stream"}, chunks=chunks)


@pytest.fixture
def app_client() -> Iterator[tuple[TestClient, list[MockHTTPClient]]]:
    settings = load_config(
        environ={"GW_AUTH__ADMIN_KEY": "sk-admin-0000000001"},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[
            {
                "model": "m",
                "provider": "p",
                "upstream_model": "up",
                "price": {"input": 1.0, "cached_input": 0.25, "output": 4.0},
            }
        ],
    )
    clients: list[MockHTTPClient] = []

    def factory() -> MockHTTPClient:
        clients.append(MockHTTPClient(answer))
        return clients[-1]

    with TestClient(create_app(settings, client_factory=factory)) as client:
        yield client, clients
    assert clients[0].closed  # the lifespan closed the upstream client


def totals(client: TestClient) -> dict[str, Any]:
    resp = client.get("/admin/api/endpoints", headers=ADMIN)
    assert resp.status_code == 200
    (endpoint,) = resp.json()["data"]
    return endpoint["totals"]


EXPECTED_COST = (200 * 1.0 + 800 * 0.25 + 100 * 4.0) / 1_000_000


def test_open_access_and_accounting(app_client: tuple[TestClient, list[MockHTTPClient]]) -> None:
    client, clients = app_client
    resp = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})

    assert resp.status_code == 200  # no gateway key configured: open access
    assert resp.json()["model"] == "m"
    assert orjson.loads(clients[0].requests[0].body)["model"] == "up"
    t = totals(client)
    assert (t["requests"], t["errors"], t["prompt_tokens"], t["cached_tokens"], t["completion_tokens"]) == (
        1,
        0,
        1000,
        800,
        100,
    )
    assert t["cost_usd"] == pytest.approx(EXPECTED_COST)


def test_stream_accounting_uses_the_stripped_usage_chunk(app_client: tuple[TestClient, list[MockHTTPClient]]) -> None:
    client, _ = app_client
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    ) as resp:
        text = resp.read().decode()

    assert text.count("data: ") == 2 and text.endswith("data: [DONE]\n\n")
    assert "usage" not in text  # the client did not ask for it
    t = totals(client)
    assert (t["requests"], t["prompt_tokens"], t["cached_tokens"]) == (1, 1000, 800)
    assert t["cost_usd"] == pytest.approx(EXPECTED_COST)


def test_errors_are_counted(app_client: tuple[TestClient, list[MockHTTPClient]]) -> None:
    client, _ = app_client
    assert (
        client.post(
            "/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
        ).status_code
        == 404
    )
    resp = client.get("/admin/api/endpoints", headers=ADMIN)
    assert resp.json()["data"][0]["totals"] is None  # the request never reached the endpoint


def test_readyz_without_endpoints() -> None:
    with TestClient(create_app(load_config(environ={}), client_factory=lambda: MockHTTPClient(answer))) as client:
        resp = client.get("/readyz")
    assert resp.status_code == 503
    assert resp.json()["reason"] == "no endpoint is configured"


@pytest.mark.parametrize(
    "headers", [{"retry-after": "inf"}, {"retry-after-ms": "inf"}, {"retry-after": "1e306"}, {"retry-after": "2e305"}]
)
def test_a_hostile_retry_after_is_a_429_and_blocks_the_endpoint_for_at_most_the_limit(headers: dict[str, str]) -> None:
    settings = load_config(
        environ={},
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    factory = lambda: MockHTTPClient(lambda request: MockResponse(429, headers, b'{"error": {"message": "slow down"}}'))  # noqa: E731
    with TestClient(create_app(settings, client_factory=factory)) as client:
        resp = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert resp.status_code == 429
        assert 1 <= int(resp.headers.get("retry-after", "1")) <= 300
        again = client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert again.status_code in (429, 503) and again.json()["error"]["type"]  # still served, as JSON


class HangingStore:
    """A MemoryStore that stops answering (every call hangs) once `hang` is set: a half-open Redis."""

    def __init__(self) -> None:
        from gateway.state_store.memory import MemoryStore

        self.inner = MemoryStore()
        self.hang = False
        self.name = "hanging"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name == "aclose" or not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.hang:
                await asyncio.sleep(3600)
            return await attr(*args, **kwargs)

        return call


def test_closing_fits_the_shutdown_budget_when_the_state_store_hangs() -> None:
    settings = load_config(
        environ={},
        server={"shutdown_timeout_s": 2},
        state_store={"timeout_s": 1.0},  # the last push alone used to wait 8 x 1 s
        providers=[{"name": "p", "base_url": "http://p.test/v1"}],
        deployments=[{"model": "m", "provider": "p"}],
    )
    store = HangingStore()
    client = TestClient(create_app(settings, client_factory=lambda: MockHTTPClient(answer), store=store))  # type: ignore[arg-type]
    with client:
        store.hang = True
        started = time.monotonic()
    assert time.monotonic() - started < 2  # the lifespan's share of the 2 s budget, not 8 s
