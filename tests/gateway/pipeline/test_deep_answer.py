"""An upstream answer nested deeper than the gateway writes back (orjson reads 1,024 levels and
writes 255) is the upstream's failure, in the client's error shape: a 502, not a 500 from a
TypeError out of the adapter."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway.app import create_app
from providers.base import UpstreamRequest
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.servers import BackgroundLoop, GatewayServer
from tests.gateway.limits.test_app_limits import KEYS, settings

DEEP = b"[" * 300 + b"]" * 300


def answer(request: UpstreamRequest) -> MockResponse:
    if b'"stream":true' in request.body:
        event = b'data: {"id":"x","object":"chat.completion.chunk","choices":[],"x":' + DEEP + b"}\n\n"
        return MockResponse(200, {"content-type": "text/event-stream"}, chunks=[event, b"data: [DONE]\n\n"])
    body = b'{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[],"x":' + DEEP + b"}"
    return MockResponse(200, {"content-type": "application/json"}, body=body)


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayServer]:
    loop = BackgroundLoop().start()
    app = create_app(settings({"backend": "memory"}), client_factory=lambda: MockHTTPClient(answer))
    server = GatewayServer(app, loop).start()
    yield server
    server.stop()
    loop.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_a_deeply_nested_answer_is_a_bad_gateway(gateway: GatewayServer, stream: bool) -> None:
    client = openai.OpenAI(base_url=gateway.url, api_key=KEYS["free"], max_retries=0, timeout=30)
    with pytest.raises(openai.APIStatusError) as caught:
        out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=stream)
        if stream:
            list(out)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    assert isinstance(caught.value.body, dict) and caught.value.body.get("type") == "api_error"
