"""Retry and fallback before the first byte: the client sees one clean answer and where it came from."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import FIRST_BYTE, RETRY, SDK, SLOW
from tests.fakes.openai_upstream import REPLY_PREFIX, Behaviour, FakeOpenAIUpstream
from tests.fakes.servers import GatewayServer

HELLO = [{"role": "user", "content": "hi"}]
PER_ENDPOINT = RETRY["attempts_per_endpoint"]


@pytest.fixture
def gateway(fresh_gateway: GatewayServer) -> GatewayServer:
    """A fresh gateway per test: what earlier tests taught the router must not change the order here."""
    return fresh_gateway


async def raw_chat(sdk: SDK, **kwargs: object) -> tuple[dict[str, str], object]:
    raw = await sdk.call("chat.completions.with_raw_response.create", messages=HELLO, **kwargs)
    return dict(raw.headers), raw.parse()


@pytest.mark.parametrize(
    ("model", "a_upstream"),
    [
        ("fallback-500", "a@status:500"),
        ("fallback-reset", "a@reset"),
        ("fallback-slow", f"a@slow:{SLOW}"),
        ("fallback-invalid-json", "a@invalid-json"),
        ("fallback-cut-body", "a@cut"),
    ],
)
async def test_retry_then_fallback(sdk: SDK, upstream: FakeOpenAIUpstream, model: str, a_upstream: str) -> None:
    headers, resp = await raw_chat(sdk, model=model)

    assert resp.choices[0].message.content == REPLY_PREFIX + "hi"  # type: ignore[attr-defined]
    assert resp.model == model  # type: ignore[attr-defined]
    assert headers["x-gateway-endpoint"] == f"fake-b/{model}"
    assert int(headers["x-gateway-attempts"]) == PER_ENDPOINT + 1
    assert len(upstream.requests_for(a_upstream)) == PER_ENDPOINT
    assert len(upstream.requests_for("b-ok")) == 1


@pytest.mark.parametrize(
    ("model", "a_upstream"),
    [
        ("fallback-500", "a@status:500"),
        ("fallback-reset", "a@reset"),
        ("fallback-slow", f"a@slow:{SLOW}"),
        ("fallback-slow-stream", f"a@slow-stream:{SLOW}"),
        ("fallback-invalid-json", "a@invalid-json"),
        ("fallback-error-first", "a@error-event:0"),
    ],
)
async def test_streaming_retry_then_fallback(
    sdk: SDK, upstream: FakeOpenAIUpstream, model: str, a_upstream: str
) -> None:
    headers, stream = await raw_chat(sdk, model=model, stream=True)
    chunks = await sdk.collect(stream)

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY_PREFIX + "hi"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert headers["x-gateway-endpoint"] == f"fake-b/{model}"
    assert int(headers["x-gateway-attempts"]) == PER_ENDPOINT + 1
    assert len(upstream.requests_for(a_upstream)) == PER_ENDPOINT


async def test_slow_first_byte_is_cut_at_the_timeout(sdk: SDK) -> None:
    start = time.monotonic()
    await raw_chat(sdk, model="fallback-slow")
    elapsed = time.monotonic() - start

    # Two timed-out attempts on A, then B answers at once: the gateway did not wait for A.
    assert PER_ENDPOINT * FIRST_BYTE * 0.9 <= elapsed < PER_ENDPOINT * FIRST_BYTE + 1.0


async def test_fail_twice_then_succeed_on_the_same_endpoint(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    upstream.fail_times("gpt-fake", PER_ENDPOINT - 1, status=503)

    headers, resp = await raw_chat(sdk, model="chat-model")

    assert headers["x-gateway-endpoint"] == "fake-a/chat-model"
    assert headers["x-gateway-attempts"] == str(PER_ENDPOINT)
    assert len(upstream.requests_for("gpt-fake")) == PER_ENDPOINT


async def test_retry_after_is_honoured(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    upstream.script("scripted-ra", Behaviour.error(429, {"retry-after": "1"}))

    start = time.monotonic()
    headers, resp = await raw_chat(sdk, model="retry-after")
    elapsed = time.monotonic() - start

    assert resp.choices[0].message.content == REPLY_PREFIX + "hi"  # type: ignore[attr-defined]
    assert headers["x-gateway-attempts"] == "2"
    assert elapsed >= 0.95
    first, second = upstream.requests_for("scripted-ra")
    assert second.body == first.body
    # Time spent waiting on the upstream is not the gateway's overhead.
    assert float(headers["x-gateway-overhead-ms"]) < 500


async def test_retry_after_longer_than_the_limit_moves_on_at_once(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    start = time.monotonic()
    headers, _ = await raw_chat(sdk, model="retry-after-long")
    elapsed = time.monotonic() - start

    assert elapsed < 1.5  # no wait: a mistaken one would be 2 s (max_retry_after) or 30 s
    assert headers["x-gateway-endpoint"] == "fake-b/retry-after-long"
    assert headers["x-gateway-attempts"] == "2"
    assert len(upstream.requests_for("a@status:429;retry-after=30")) == 1

    # A asked for 30 s: until then it is not contacted at all.
    headers, _ = await raw_chat(sdk, model="retry-after-long")
    assert headers["x-gateway-endpoint"] == "fake-b/retry-after-long"
    assert headers["x-gateway-attempts"] == "1"
    assert len(upstream.requests_for("a@status:429;retry-after=30")) == 1
