"""The gateway's response headers, on successes, errors and unknown routes."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from tests.e2e.conftest import GATEWAY_KEY, SDK
from tests.fakes.servers import GatewayServer

HELLO = [{"role": "user", "content": "hi"}]
AUTH = {"authorization": f"Bearer {GATEWAY_KEY}"}
GENERATED_ID = re.compile(r"^req_[0-9a-f]{32}$")


@pytest.fixture
def gateway(fresh_gateway: GatewayServer) -> GatewayServer:
    """A fresh gateway per test: what earlier tests taught the router must not change the order here."""
    return fresh_gateway


def assert_gateway_headers(headers: httpx.Headers | dict[str, str], *, attempts: str, endpoint: str | None) -> None:
    assert GENERATED_ID.match(headers["x-request-id"])
    assert headers["x-gateway-attempts"] == attempts
    assert 0.0 <= float(headers["x-gateway-overhead-ms"]) < 1000.0
    assert headers.get("x-gateway-endpoint") == endpoint
    assert "x-gateway-fail-open" not in headers


async def test_success(sdk: SDK) -> None:
    raw = await sdk.call("chat.completions.with_raw_response.create", model="chat-model", messages=HELLO)
    assert_gateway_headers(raw.headers, attempts="1", endpoint="fake-a/chat-model")


async def test_streaming_success(sdk: SDK) -> None:
    raw = await sdk.call("chat.completions.with_raw_response.create", model="chat-model", messages=HELLO, stream=True)
    await sdk.collect(raw.parse())
    assert_gateway_headers(raw.headers, attempts="1", endpoint="fake-a/chat-model")
    assert raw.headers["cache-control"] == "no-cache"


async def test_upstream_error(sdk: SDK) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await sdk.call("chat.completions.create", model="all-500", messages=HELLO)
    # The endpoint tried last.
    assert_gateway_headers(info.value.response.headers, attempts="4", endpoint="fake-b/all-500")


async def test_validation_error(sdk: SDK) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.call("chat.completions.create", model="chat-model", messages=HELLO, temperature=9)
    assert_gateway_headers(info.value.response.headers, attempts="0", endpoint=None)


async def test_unknown_model(sdk: SDK) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await sdk.call("chat.completions.create", model="nope", messages=HELLO)
    assert_gateway_headers(info.value.response.headers, attempts="0", endpoint=None)


async def test_models_and_unknown_routes(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        responses = [
            await http.get(gateway.url + "/models", headers=AUTH),
            await http.get(gateway.url + "/models/nope", headers=AUTH),
            await http.get(gateway.url + "/no/such/route", headers=AUTH),
            await http.get(gateway.url + "/chat/completions", headers=AUTH),
            await http.get(gateway.root + "/healthz"),
        ]
    assert [r.status_code for r in responses] == [200, 404, 404, 405, 200]
    for resp in responses:
        assert_gateway_headers(resp.headers, attempts="0", endpoint=None)


@pytest.mark.parametrize("model", ["chat-model", "nope"])
async def test_client_request_id_is_echoed(sdk: SDK, model: str) -> None:
    try:
        raw = await sdk.call(
            "chat.completions.with_raw_response.create",
            model=model,
            messages=HELLO,
            extra_headers={"x-request-id": "trace-42.a_b:c"},
        )
        headers = raw.headers
    except openai.NotFoundError as exc:
        headers = exc.response.headers
    assert headers["x-request-id"] == "trace-42.a_b:c"


async def test_insane_client_request_id_is_replaced(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(
            gateway.url + "/chat/completions",
            json={"model": "chat-model", "messages": HELLO},
            headers={**AUTH, "x-request-id": "bad id with spaces"},
        )
    assert resp.status_code == 200
    assert GENERATED_ID.match(resp.headers["x-request-id"])


async def test_request_ids_are_unique(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        ids = {(await http.get(gateway.url + "/models", headers=AUTH)).headers["x-request-id"] for _ in range(5)}
    assert len(ids) == 5
