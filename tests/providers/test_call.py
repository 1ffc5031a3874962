"""providers.call: one upstream call, shared by the dispatcher and the probe client."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from kernel.errors import ProviderConnectError, ProviderRateLimited, ProviderRejected, ProviderServerError
from providers.base import UpstreamRequest
from providers.call import call, open_call
from providers.http import Timeouts
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.catalog import make_endpoint

TIMEOUTS = Timeouts(connect=1, first_byte=1, between_chunks=1, total=1)
ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "model": "upstream-name",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
BODY = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def upstream(*responses: MockResponse | BaseException) -> tuple[MockHTTPClient, list[UpstreamRequest]]:
    left = list(responses)

    def handler(request: UpstreamRequest) -> MockResponse:
        nxt = left.pop(0)
        if isinstance(nxt, BaseException):
            raise nxt
        return nxt

    client = MockHTTPClient(handler)
    return client, client.requests


def built(ep: Any, stream: bool = False) -> UpstreamRequest:
    return ep.adapter.build_request(ep.target, "chat", BODY, stream)


async def test_an_answer_is_parsed_by_the_adapter() -> None:
    ep = make_endpoint("ep", "m")
    client, sent = upstream(MockResponse(200, {"content-type": "application/json"}, orjson.dumps(ANSWER)))
    parsed = await call(client, TIMEOUTS, ep, "chat", built(ep))
    assert orjson.loads(parsed.body)["model"] == "m"  # the public name, as the adapter writes it
    assert parsed.usage is not None and parsed.usage.prompt_tokens == 3
    assert len(sent) == 1 and sent[0].url.startswith("http://upstream.test/v1")


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, ProviderRejected), (429, ProviderRateLimited), (500, ProviderServerError), (503, ProviderServerError)],
)
async def test_an_error_status_is_the_adapters_mapped_error(status: int, kind: type) -> None:
    ep = make_endpoint("ep", "m")
    body = orjson.dumps({"error": {"message": "no thanks", "type": "invalid_request_error"}})
    client, _ = upstream(MockResponse(status, {"retry-after": "2"}, body))
    with pytest.raises(kind) as caught:
        await call(client, TIMEOUTS, ep, "chat", built(ep))
    assert caught.value.upstream_status == status and "no thanks" in caught.value.message


async def test_a_transport_failure_passes_through_without_an_upstream_status() -> None:
    ep = make_endpoint("ep", "m")
    client, _ = upstream(ProviderConnectError("refused", endpoint="ep"))
    with pytest.raises(ProviderConnectError) as caught:
        await call(client, TIMEOUTS, ep, "chat", built(ep))
    assert caught.value.upstream_status is None


async def test_open_call_leaves_a_stream_unread() -> None:
    ep = make_endpoint("ep", "m")
    stream = MockResponse(200, {"content-type": "text/event-stream"}, chunks=[b"data: [DONE]\n\n"])
    client, _ = upstream(stream)
    response = await open_call(client, TIMEOUTS, ep, built(ep, stream=True))
    assert response.status == 200
    assert [chunk async for chunk in response.chunks()] == [b"data: [DONE]\n\n"]


def nested(depth: int) -> bytes:
    return b'{"id": "c1", "object": "chat.completion", "choices": [], "x": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("depth", [300, 1010])
async def test_an_answer_nested_deeper_than_it_can_be_written_back_is_the_upstreams_error(depth: int) -> None:
    # orjson reads 1,024 levels and writes 255: between the two, the adapter's re-encoding raised
    # orjson.JSONEncodeError (a TypeError) out of the call, past every ProviderError handler.
    ep = make_endpoint("ep", "m")
    client, _ = upstream(MockResponse(200, {"content-type": "application/json"}, nested(depth)))
    with pytest.raises(ProviderServerError, match="nested too deep"):
        await call(client, TIMEOUTS, ep, "chat", built(ep))
