"""Every error reaches the SDK as its typed exception, with OpenAI's error JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from tests.e2e.conftest import ADMIN_KEY, GATEWAY_KEY, HASHED_KEY, RETRY, SDK
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import GatewayServer

HELLO = [{"role": "user", "content": "hi"}]
AUTH = {"authorization": f"Bearer {GATEWAY_KEY}"}


@pytest.fixture
def gateway(fresh_gateway: GatewayServer) -> GatewayServer:
    """A fresh gateway per test: what earlier tests taught the router must not change the order here."""
    return fresh_gateway


def assert_openai_error(body: Any, *, type_: str, code: str | None = None, param: str | None = None) -> None:
    assert set(body) == {"message", "type", "param", "code"}
    assert isinstance(body["message"], str) and body["message"]
    assert body["type"] == type_
    assert body["code"] == code
    assert body["param"] == param


# -- 400 -------------------------------------------------------------------------------


async def test_malformed_json_is_400(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(
            gateway.url + "/chat/completions",
            content=b'{"model": "chat-model", "messages": [',
            headers={**AUTH, "content-type": "application/json"},
        )
    assert resp.status_code == 400
    assert resp.headers["content-type"] == "application/json"
    assert_openai_error(resp.json()["error"], type_="invalid_request_error")
    assert "parse the JSON body" in resp.json()["error"]["message"]


async def test_body_that_is_not_an_object_is_400(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(gateway.url + "/chat/completions", content=b"[1, 2]", headers=AUTH)
    assert resp.status_code == 400
    assert_openai_error(resp.json()["error"], type_="invalid_request_error")


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 3}, "temperature"),
        ({"n": 1.5}, "n"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ],
)
async def test_wrong_types_are_bad_requests(
    sdk: SDK, upstream: FakeOpenAIUpstream, kwargs: dict[str, Any], param: str
) -> None:
    args: dict[str, Any] = {"model": "chat-model", "messages": HELLO, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.call("chat.completions.create", **args)

    assert info.value.status_code == 400
    assert info.value.param == param
    assert_openai_error(info.value.body, type_="invalid_request_error", param=param)
    assert upstream.requests == []  # rejected before any upstream call


async def test_missing_messages(sdk: SDK) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.call("post", "/chat/completions", body={"model": "chat-model"}, cast_to=ChatCompletion)

    assert info.value.param == "messages"
    assert "Missing required parameter: 'messages'" in info.value.message


async def test_missing_model(sdk: SDK) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.call("post", "/chat/completions", body={"messages": HELLO}, cast_to=ChatCompletion)

    assert info.value.param == "model"


@pytest.mark.parametrize(
    ("path", "kwargs", "param"),
    [
        (
            "chat.completions.create",
            {"model": "no-tools", "messages": HELLO, "tools": [{"type": "function", "function": {"name": "f"}}]},
            "tools",
        ),
        (
            "chat.completions.create",
            {"model": "few-logprobs", "messages": HELLO, "logprobs": True, "top_logprobs": 5},
            "top_logprobs",
        ),
        ("completions.create", {"model": "few-logprobs", "prompt": "x", "logprobs": 5}, "logprobs"),
        ("embeddings.create", {"model": "chat-only", "input": "x"}, "model"),
        ("completions.create", {"model": "embed-model", "prompt": "x"}, "model"),
    ],
)
async def test_unsupported_parameter_for_every_candidate(
    sdk: SDK, upstream: FakeOpenAIUpstream, path: str, kwargs: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.call(path, **kwargs)

    assert info.value.code == "unsupported_parameter"
    assert info.value.param == param
    assert upstream.requests == []


async def test_supported_parameters_pass_on_a_limited_deployment(sdk: SDK) -> None:
    resp = await sdk.call(
        "chat.completions.create", model="few-logprobs", messages=HELLO, logprobs=True, top_logprobs=2
    )
    assert len(resp.choices[0].logprobs.content[0].top_logprobs) == 2

    resp = await sdk.call(
        "chat.completions.create",
        model="no-tools",
        messages=HELLO,
        tools=[{"type": "function", "function": {"name": "f"}}],
        tool_choice="none",
    )
    assert resp.choices[0].message.tool_calls is None


async def test_upstream_400_is_passed_through_without_fallback(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.call("chat.completions.create", model="rejects", messages=HELLO)

    assert info.value.body["message"] == "fake upstream error 400"
    assert info.value.response.headers["x-gateway-attempts"] == "1"
    assert info.value.response.headers["x-gateway-endpoint"] == "fake-a/rejects"
    assert len(upstream.requests_for("a@status:400")) == 1
    assert upstream.requests_for("b-ok") == []


# -- 401 / 403 ---------------------------------------------------------------------------


async def test_missing_key_is_401(gateway: GatewayServer, upstream: FakeOpenAIUpstream) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(gateway.url + "/chat/completions", json={"model": "chat-model", "messages": HELLO})
    assert resp.status_code == 401
    assert_openai_error(resp.json()["error"], type_="invalid_request_error", code="invalid_api_key")
    assert upstream.requests == []


async def test_wrong_key_is_authentication_error(sdk_factory: Callable[..., SDK], gateway: GatewayServer) -> None:
    sdk = sdk_factory(gateway, api_key="sk-wrong-key-123456")
    with pytest.raises(openai.AuthenticationError) as info:
        await sdk.call("chat.completions.create", model="chat-model", messages=HELLO)
    with pytest.raises(openai.AuthenticationError):
        await sdk.call("models.list")

    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"


async def test_key_configured_as_sha256_works(sdk_factory: Callable[..., SDK], gateway: GatewayServer) -> None:
    sdk = sdk_factory(gateway, api_key=HASHED_KEY)
    resp = await sdk.call("chat.completions.create", model="chat-model", messages=HELLO)

    assert resp.choices[0].message.content


async def test_gateway_key_on_admin_api_is_permission_denied(sdk: SDK, gateway: GatewayServer) -> None:
    with pytest.raises(openai.PermissionDeniedError) as info:
        await sdk.call("get", gateway.root + "/admin/api/endpoints", cast_to=object)

    assert info.value.status_code == 403
    assert info.value.code == "permission_denied"


async def test_admin_key_on_admin_api(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.get(gateway.root + "/admin/api/endpoints", headers={"authorization": f"Bearer {ADMIN_KEY}"})
        wrong = await http.get(
            gateway.root + "/admin/api/endpoints", headers={"authorization": "Bearer sk-nobody-1234567"}
        )
    assert resp.status_code == 200
    ids = {ep["id"] for ep in resp.json()["data"]}
    assert {"fake-a/chat-model", "fake-a/fallback-500", "fake-b/fallback-500"} <= ids
    assert wrong.status_code == 401


# -- 404 / 413 -----------------------------------------------------------------------------


async def test_unknown_model_is_not_found(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await sdk.call("chat.completions.create", model="no-such-model", messages=HELLO)

    assert info.value.code == "model_not_found"
    assert info.value.param == "model"
    assert "no-such-model" in info.value.message
    assert upstream.requests == []


async def test_unknown_url_is_openai_shaped_404(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.get(gateway.url + "/no/such/route", headers=AUTH)
    assert resp.status_code == 404
    assert_openai_error(resp.json()["error"], type_="invalid_request_error", code="not_found")


async def test_body_over_the_limit_is_413(gateway: GatewayServer, upstream: FakeOpenAIUpstream) -> None:
    big = [{"role": "user", "content": "x" * (65 * 1024)}]
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(
            gateway.url + "/chat/completions", json={"model": "chat-model", "messages": big}, headers=AUTH
        )
    assert resp.status_code == 413
    assert_openai_error(resp.json()["error"], type_="invalid_request_error", code="payload_too_large")
    assert upstream.requests == []


async def test_body_over_the_limit_without_content_length_is_413(gateway: GatewayServer) -> None:
    async def body() -> Any:
        for _ in range(80):
            yield b"x" * 1024

    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(gateway.url + "/chat/completions", content=body(), headers=AUTH)
    assert "content-length" not in resp.request.headers
    assert resp.status_code == 413


async def test_body_over_the_limit_through_the_sdk(sdk: SDK) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        await sdk.call(
            "chat.completions.create", model="chat-model", messages=[{"role": "user", "content": "x" * (65 * 1024)}]
        )

    assert info.value.status_code == 413
    assert info.value.code == "payload_too_large"


# -- upstream failures ----------------------------------------------------------------------


async def test_upstream_that_keeps_answering_429_is_rate_limit_error(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        await sdk.call("chat.completions.create", model="ratelimited", messages=HELLO)

    assert info.value.status_code == 429
    assert info.value.type == "rate_limit_error"
    assert len(upstream.requests_for("rl@status:429")) == RETRY["attempts_per_endpoint"]
    assert info.value.response.headers["x-gateway-attempts"] == str(RETRY["attempts_per_endpoint"])


async def test_all_endpoints_failing_is_502(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await sdk.call("chat.completions.create", model="all-500", messages=HELLO)

    assert info.value.status_code == 502
    assert info.value.response.headers["x-gateway-attempts"] == "4"
    assert len(upstream.requests_for("x@status:500")) == 2
    assert len(upstream.requests_for("y@reset")) == 2


async def test_all_endpoints_timing_out_is_504(sdk: SDK) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await sdk.call("chat.completions.create", model="all-slow", messages=HELLO)

    assert info.value.status_code == 504
    assert info.value.code == "upstream_timeout"


async def test_no_ready_endpoint_is_503_with_retry_after(sdk: SDK) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await sdk.call("chat.completions.create", model="unavailable", messages=HELLO)

    assert info.value.status_code == 503
    assert info.value.code == "no_endpoint_available"
    assert info.value.response.headers["retry-after"] == "1"


async def test_streaming_request_that_fails_before_the_first_byte_is_a_plain_error(sdk: SDK) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await sdk.call("chat.completions.create", model="all-500", messages=HELLO, stream=True)

    assert info.value.status_code == 502
    assert info.value.response.headers["content-type"] == "application/json"
