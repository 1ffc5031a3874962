"""Counting a prompt with an endpoint's own tokenizer: which candidate counts, the requests it
takes (against a fake llama-server that speaks /apply-template and /tokenize), and failures."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.pipeline.count import MAX_STEPS, count_prompt, counting_endpoint
from kernel.errors import ProviderError, ProviderServerError
from providers.base import Target, UpstreamRequest
from providers.http import Timeouts
from providers.http_mock import MockHTTPClient, MockResponse
from providers.llamacpp import LlamaCppAdapter
from providers.openai_compat import OpenAICompatAdapter
from tests.fakes.catalog import make_endpoint

TIMEOUTS = Timeouts(connect=1, first_byte=1, between_chunks=1, total=1)
BODY = {"model": "m", "messages": [{"role": "user", "content": "one two three"}]}
JSON = {"content-type": "application/json"}


def fake_llama_server(request: UpstreamRequest) -> MockResponse:
    """Its template wraps each message in markers; its tokenizer splits on spaces."""
    body = orjson.loads(request.body)
    if request.url.endswith("/apply-template"):
        prompt = "".join(f"<|{m['role']}|> {m['content']} <|end|> " for m in body["messages"])
        return MockResponse(200, JSON, orjson.dumps({"prompt": prompt}))
    if request.url.endswith("/tokenize"):
        return MockResponse(200, JSON, orjson.dumps({"tokens": list(range(len(body["content"].split())))}))
    return MockResponse(404, JSON, b'{"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}')


def test_the_first_ready_counting_candidate_is_chosen() -> None:
    remote = make_endpoint("r/m", adapter=OpenAICompatAdapter())
    down = make_endpoint("d/m", adapter=LlamaCppAdapter(), ready=lambda: False)
    local = make_endpoint("l/m", adapter=LlamaCppAdapter())
    assert counting_endpoint((remote, down, local)) is local
    assert counting_endpoint((remote, down)) is None
    assert counting_endpoint(()) is None


async def test_counts_the_rendered_prompt_in_two_requests() -> None:
    client = MockHTTPClient(fake_llama_server)
    endpoint = make_endpoint("l/m", base_url="http://engine.test:8001/v1", adapter=LlamaCppAdapter())
    # "<|user|> one two three <|end|>": five pieces.
    assert await count_prompt(client, TIMEOUTS, endpoint, BODY) == 5
    assert [r.url for r in client.requests] == [
        "http://engine.test:8001/apply-template",
        "http://engine.test:8001/tokenize",
    ]
    two = {**BODY, "messages": [*BODY["messages"], {"role": "assistant", "content": "four"}]}
    assert await count_prompt(client, TIMEOUTS, endpoint, two) == 5 + 3  # "<|assistant|> four <|end|>"


async def test_an_engine_without_the_routes_is_a_provider_error() -> None:
    client = MockHTTPClient(lambda r: MockResponse(404, JSON, b'{"error": {"message": "File Not Found"}}'))
    endpoint = make_endpoint("l/m", adapter=LlamaCppAdapter())
    with pytest.raises(ProviderError) as caught:
        await count_prompt(client, TIMEOUTS, endpoint, BODY)
    assert "404" in str(caught.value) and caught.value.endpoint == "l/m"
    assert len(client.requests) == 1


class EndlessCounter(LlamaCppAdapter):
    def count_step(
        self, target: Target, body: dict[str, Any], step: int, answer: bytes | None
    ) -> UpstreamRequest | int:
        return UpstreamRequest("POST", target.base_url + "/again", {}, b"{}")


async def test_an_adapter_that_never_ends_is_cut_off() -> None:
    client = MockHTTPClient(lambda r: MockResponse(200, JSON, b"{}"))
    with pytest.raises(ProviderServerError, match="did not finish counting"):
        await count_prompt(client, TIMEOUTS, make_endpoint("l/m", adapter=EndlessCounter()), BODY)
    assert len(client.requests) == MAX_STEPS
