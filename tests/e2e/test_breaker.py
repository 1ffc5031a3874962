"""The circuit breaker end to end: a failing endpoint stops receiving traffic, and when every
endpoint is open the gateway still tries (fail open) and says so."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest

from tests.e2e.conftest import ADMIN_KEY, SDK, gateway_settings
from tests.fakes.openai_upstream import REPLY_PREFIX, Behaviour, FakeOpenAIUpstream
from tests.fakes.servers import GatewayServer

HELLO = [{"role": "user", "content": "hi"}]
MIN_REQUESTS = 2


@pytest.fixture
def breaker_gateway(
    start_gateway: Callable[..., GatewayServer], upstream: FakeOpenAIUpstream, llama: FakeOpenAIUpstream
) -> GatewayServer:
    settings = gateway_settings(
        upstream.url,
        llama.url,
        breaker={"min_requests": MIN_REQUESTS, "failure_rate": 0.5, "window_seconds": 60, "open_seconds": 60},
        retry={"attempts_per_endpoint": 1, "max_attempts": 4, "backoff_base": 0.01},
    )
    return start_gateway(settings)


async def chat(sdk: SDK, model: str) -> dict[str, str]:
    raw = await sdk.call("chat.completions.with_raw_response.create", model=model, messages=HELLO)
    assert raw.parse().choices[0].message.content == REPLY_PREFIX + "hi"
    return dict(raw.headers)


async def breaker_states(gateway: GatewayServer) -> dict[str, str]:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.get(gateway.root + "/admin/api/endpoints", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    return {ep["id"]: ep["breaker"]["state"] for ep in resp.json()["data"]}


async def test_open_endpoint_is_skipped(
    sdk_factory: Callable[..., SDK], breaker_gateway: GatewayServer, upstream: FakeOpenAIUpstream
) -> None:
    sdk = sdk_factory(breaker_gateway)
    for _ in range(MIN_REQUESTS):
        headers = await chat(sdk, "fallback-500")
        assert (headers["x-gateway-endpoint"], headers["x-gateway-attempts"]) == ("fake-b/fallback-500", "2")
    assert len(upstream.requests_for("a@status:500")) == MIN_REQUESTS
    assert (await breaker_states(breaker_gateway))["fake-a/fallback-500"] == "open"

    for _ in range(3):
        headers = await chat(sdk, "fallback-500")
        assert (headers["x-gateway-endpoint"], headers["x-gateway-attempts"]) == ("fake-b/fallback-500", "1")
        assert "x-gateway-fail-open" not in headers
    assert len(upstream.requests_for("a@status:500")) == MIN_REQUESTS  # A got nothing more


async def test_all_open_fails_open_and_says_so(
    sdk_factory: Callable[..., SDK], breaker_gateway: GatewayServer, upstream: FakeOpenAIUpstream
) -> None:
    sdk = sdk_factory(breaker_gateway)
    for _ in range(MIN_REQUESTS):
        with pytest.raises(openai.InternalServerError) as info:
            await sdk.call("chat.completions.create", model="all-500", messages=HELLO)
        assert "x-gateway-fail-open" not in info.value.response.headers
    states = await breaker_states(breaker_gateway)
    assert (states["fake-a/all-500"], states["fake-b/all-500"]) == ("open", "open")

    with pytest.raises(openai.InternalServerError) as info:
        await sdk.call("chat.completions.create", model="all-500", messages=HELLO)

    assert info.value.response.headers["x-gateway-fail-open"] == "circuit_open"
    assert info.value.response.headers["x-gateway-attempts"] == "2"
    assert len(upstream.requests_for("x@status:500")) == MIN_REQUESTS + 1  # still tried


async def test_fail_open_can_still_succeed(
    sdk_factory: Callable[..., SDK], breaker_gateway: GatewayServer, upstream: FakeOpenAIUpstream
) -> None:
    sdk = sdk_factory(breaker_gateway)
    upstream.script("scripted-ra", *[Behaviour.error(500)] * MIN_REQUESTS)
    for _ in range(MIN_REQUESTS):
        with pytest.raises(openai.InternalServerError):
            await sdk.call("chat.completions.create", model="retry-after", messages=HELLO)

    headers = await chat(sdk, "retry-after")

    assert headers["x-gateway-fail-open"] == "circuit_open"
    assert headers["x-gateway-endpoint"] == "fake-a/retry-after"


async def test_client_errors_do_not_trip_the_breaker(
    sdk_factory: Callable[..., SDK], breaker_gateway: GatewayServer, upstream: FakeOpenAIUpstream
) -> None:
    sdk = sdk_factory(breaker_gateway)
    for _ in range(MIN_REQUESTS + 2):
        with pytest.raises(openai.BadRequestError):
            await sdk.call("chat.completions.create", model="rejects", messages=HELLO)

    assert (await breaker_states(breaker_gateway))["fake-a/rejects"] == "closed"
    assert len(upstream.requests_for("a@status:400")) == MIN_REQUESTS + 2
