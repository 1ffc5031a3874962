"""A stream that breaks after it started: the SDK raises while iterating, and there is no [DONE]."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.e2e.conftest import GATEWAY_KEY, SDK
from tests.fakes.openai_upstream import FakeOpenAIUpstream
from tests.fakes.servers import GatewayServer

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
