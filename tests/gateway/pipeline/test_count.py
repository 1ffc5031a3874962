"""Counting a prompt with an endpoint's own tokenizer: which candidate counts (one the request may
reach under routing's filters), the requests it takes (against a fake llama-server that speaks
/apply-template and /tokenize), and failures."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from gateway.pipeline.count import MAX_STEPS, count_prompt, counting_endpoint
from gateway.routing import preferences
from gateway.routing.decision import NOT_READY
from gateway.routing.features import DEFAULT_BLOCKS, RequestFeatures, extract
from gateway.routing.settings import KeyPolicy
from gateway.routing.snapshot import StaticSnapshot
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


def features(body: dict[str, Any] = BODY, **policy: Any) -> RequestFeatures:
    prefs = preferences.parse(body.get("provider"))
    return extract(
        "chat",
        body,
        blocks=DEFAULT_BLOCKS,
        family_bytes=0,
        expected_output_tokens=16,
        prefs=prefs,
        key_policy=KeyPolicy(**policy),
    )


def test_the_first_ready_counting_candidate_is_chosen() -> None:
    remote = make_endpoint("r/m", adapter=OpenAICompatAdapter())
    down = make_endpoint("d/m", adapter=LlamaCppAdapter())
    local = make_endpoint("l/m", adapter=LlamaCppAdapter())
    snapshot = StaticSnapshot(not_ready=frozenset({"d/m"}))
    chosen, ruled_out = counting_endpoint((remote, down, local), features(), snapshot)
    assert chosen is local and [(x.endpoint.id, x.reason) for x in ruled_out] == [("d/m", NOT_READY)]
    assert counting_endpoint((remote, down), features(), snapshot)[0] is None
    assert counting_endpoint((), features(), snapshot) == (None, [])


def test_only_an_endpoint_the_request_may_reach_counts() -> None:
    us = replace(make_endpoint("us/m", adapter=LlamaCppAdapter()), region="us", keeps_prompts=True)
    eu = replace(make_endpoint("eu/m", adapter=LlamaCppAdapter()), region="eu")
    plain = StaticSnapshot()

    def pick(
        *candidates: Any, snapshot: StaticSnapshot = plain, f: RequestFeatures | None = None
    ) -> tuple[str | None, list[str]]:
        chosen, ruled_out = counting_endpoint(candidates, f or features(), snapshot)
        return (chosen.id if chosen else None), [x.reason for x in ruled_out]

    assert pick(us, eu, f=features(regions=("eu",))) == ("eu/m", ["region"])
    assert pick(us, eu, f=features(data_collection="deny")) == ("eu/m", ["data_policy"])
    assert pick(us, f=features(regions=("eu",), data_collection="deny")) == (None, ["region"])
    assert pick(eu, us, f=features({**BODY, "provider": {"ignore": ["eu"]}})) == ("us/m", ["pref_ignored"])
    assert pick(us, eu, snapshot=StaticSnapshot(health_states={"us/m": "demoted"})) == ("eu/m", ["health_demoted"])
    assert pick(us, eu, snapshot=StaticSnapshot(blocks={"us/m": "breaker_open"})) == ("eu/m", ["breaker_open"])
    # Not a reason to estimate: a prompt longer than the window (what a client counts to learn).
    long = features({**BODY, "max_tokens": 10**9})
    assert pick(us, f=long) == ("us/m", [])


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
