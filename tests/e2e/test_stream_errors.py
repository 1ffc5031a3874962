"""A stream that breaks after it started: the SDK raises while iterating, and there is no [DONE]."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx
import openai
import pytest

from tests.e2e.conftest import GATEWAY_KEY, SDK, gateway_settings
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import BackgroundLoop, GatewayServer

HELLO = [{"role": "user", "content": "tell me more"}]


@pytest.mark.parametrize("model", ["cut-stream", "error-stream", "early-end-stream"])
async def test_sdk_raises_after_the_first_chunks(sdk: SDK, upstream: FakeOpenAIUpstream, model: str) -> None:
    stream = await sdk.call("chat.completions.create", model=model, messages=HELLO, stream=True)
    chunks, error = await sdk.collect_until_error(stream)

    assert isinstance(error, openai.APIError)
    assert not isinstance(error, openai.APIStatusError)  # the status line said 200; the break came later
    assert len(chunks) == 2  # the upstream sent two events before breaking
    assert chunks[0].choices[0].delta.role == "assistant"
    assert error.body is not None and error.body["type"] == "api_error"
    assert error.body["code"] == "upstream_stream_error"
    # Committed: no retry after the first byte.
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("model", ["cut-stream", "error-stream", "early-end-stream"])
async def test_no_done_on_the_wire(gateway: GatewayServer, model: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(
            gateway.url + "/chat/completions",
            json={"model": model, "messages": HELLO, "stream": True},
            headers={"authorization": f"Bearer {GATEWAY_KEY}"},
        )
    assert resp.status_code == 200
    assert "[DONE]" not in resp.text
    events = [block.removeprefix("data: ") for block in resp.text.split("\n\n") if block]
    assert len(events) == 3
    assert all(json.loads(e)["object"] == "chat.completion.chunk" for e in events[:2])
    assert set(json.loads(events[-1])) == {"error"}
    assert json.loads(events[-1])["error"]["code"] == "upstream_stream_error"


async def test_legacy_completion_stream_cut(sdk: SDK) -> None:
    stream = await sdk.call("completions.create", model="cut-stream", prompt="Once", stream=True)
    chunks, error = await sdk.collect_until_error(stream)

    assert isinstance(error, openai.APIError)
    assert [c.choices[0].text for c in chunks] == [" Once", " upon"]


def _finished_requests(metrics: str, model: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("gateway_requests_total{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_client_disconnect_stops_the_relay(
    servers: BackgroundLoop, start_gateway: Callable[..., GatewayServer], llama: FakeOpenAIUpstream
) -> None:
    """A client that goes away mid-stream frees the upstream at once: the request is accounted long
    before the slow upstream would have finished."""
    slow = servers.call(FakeOpenAIUpstream(chunk_delay=0.4).start())
    try:
        server = start_gateway(gateway_settings(slow.url, llama.url))
        auth = {"authorization": f"Bearer {GATEWAY_KEY}"}
        body = {"model": "chat-model", "messages": HELLO, "stream": True}
        async with httpx.AsyncClient(timeout=10) as http:
            async with http.stream("POST", server.url + "/chat/completions", json=body, headers=auth) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        break  # the first event, then hang up
            left = time.monotonic()
            while True:
                metrics = (await http.get(server.root + "/metrics")).text
                if _finished_requests(metrics, "chat-model") >= 1 or time.monotonic() - left > 5:
                    break
                await asyncio.sleep(0.02)
        took = time.monotonic() - left
        assert _finished_requests(metrics, "chat-model") == 1
        # The rest of the stream would take at least 0.4 s per event.
        assert took < 0.35, took
    finally:
        servers.call(slow.stop())
