"""ProbeClient: what counts as the endpoint's error, and what is the request's own doing."""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
import pytest

from kernel.errors import ProviderConnectError, ProviderRejected
from probes.budget import BudgetExhausted, ProbeBudget
from probes.client import ContextOverflow, ProbeClient, ProbeRejected, ProbeUnavailable
from providers.http import Timeouts
from providers.http_mock import MockHTTPClient, MockResponse
from providers.openai_compat import OpenAICompatAdapter
from tests.fakes.catalog import make_endpoint

TIMEOUTS = Timeouts(connect=1, first_byte=1, between_chunks=1, total=1)


def probe_client(status: int, message: str) -> ProbeClient:
    body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    http = MockHTTPClient(lambda request: MockResponse(status=status, body=body))
    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    return ProbeClient(make_endpoint("ep", "m"), http, TIMEOUTS, budget)


@pytest.mark.parametrize("message", [
    "This model's maximum context length is 4096 tokens. However, you requested 4256 tokens.",
    "Requested tokens (5000) exceed context window of 4096",
])
async def test_a_context_length_refusal_is_the_requests_doing_not_an_endpoint_error(message: str) -> None:
    client = probe_client(400, message)
    with pytest.raises(ContextOverflow):
        await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert client.requests == 1 and client.errors == 0


@pytest.mark.parametrize(("status", "message"), [(400, "temperature must be at most 2"), (500, "context length bug")])
async def test_other_refusals_and_failures_count_as_errors(status: int, message: str) -> None:
    client = probe_client(status, message)
    with pytest.raises(ProbeUnavailable) as caught:
        await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert not isinstance(caught.value, ContextOverflow)
    assert client.errors == 1


async def test_a_request_the_endpoint_refuses_is_a_rejection_the_suite_can_drop() -> None:
    client = probe_client(400, "cannot force a call among several tools")
    with pytest.raises(ProbeRejected):
        await client.chat({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})


async def test_an_adapter_that_refuses_to_build_the_request_raises_a_rejection_not_its_own_error() -> None:
    class Refuses(OpenAICompatAdapter):
        def upstream_body(self, target: Any, op: Any, body: dict[str, Any], stream: bool) -> dict[str, Any]:
            raise ProviderRejected("cannot force a call among several tools")

    http = MockHTTPClient(lambda request: MockResponse(status=200, body=b"{}"))
    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    client = ProbeClient(make_endpoint("ep", "m", adapter=Refuses()), http, TIMEOUTS, budget)
    with pytest.raises(ProbeRejected, match="several tools"):
        await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert http.requests == []


async def test_a_transport_failure_is_unavailability_counted_as_an_error() -> None:
    def down(request: Any) -> MockResponse:
        raise ProviderConnectError("upstream ep could not be reached", endpoint="ep")

    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    client = ProbeClient(make_endpoint("ep", "m"), MockHTTPClient(down), TIMEOUTS, budget)
    with pytest.raises(ProbeUnavailable) as caught:
        await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert type(caught.value) is ProbeUnavailable and caught.value.status == 502
    assert client.requests == 1 and client.errors == 1


async def test_each_answer_records_its_prompt_and_the_reported_prompt_tokens() -> None:
    counts = iter([30, 30, 19])

    def answer(request: Any) -> MockResponse:
        body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": next(counts), "completion_tokens": 1, "total_tokens": 2}}
        return MockResponse(status=200, body=orjson.dumps(body))

    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    client = ProbeClient(make_endpoint("ep", "m"), MockHTTPClient(answer), TIMEOUTS, budget)
    for max_tokens in (1, 5):
        await client.chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": max_tokens})
    await client.chat({"messages": [{"role": "user", "content": "y"}], "max_tokens": 1})
    (x1, n1), (x2, n2), (y, n3) = client.prompt_counts
    assert x1 == x2 != y and (n1, n2, n3) == (30, 30, 19)


async def test_an_answer_without_usage_is_recorded_as_uncounted() -> None:
    def answer(request: Any) -> MockResponse:
        body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "a"}, "finish_reason": "stop"}]}
        return MockResponse(status=200, body=orjson.dumps(body))

    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    client = ProbeClient(make_endpoint("ep", "m"), MockHTTPClient(answer), TIMEOUTS, budget)
    await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert [n for _, n in client.prompt_counts] == [None]


async def test_a_failed_request_records_no_count() -> None:
    client = probe_client(500, "down")
    with pytest.raises(ProbeUnavailable):
        await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert client.prompt_counts == []


def answering(body: Any) -> ProbeClient:
    http = MockHTTPClient(lambda request: MockResponse(status=200, body=orjson.dumps(body)))
    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    return ProbeClient(make_endpoint("ep", "m"), http, TIMEOUTS, budget)


def _answer(usage: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": "hi"}
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "usage": usage,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": "n/a", "completion_tokens": 3}, "none", [1], {"prompt_tokens": -5, "completion_tokens": 3},
    {"prompt_tokens": 1e300, "completion_tokens": float("nan")}, None,
])
async def test_a_hostile_usage_counts_its_valid_claims_and_estimates_the_rest(usage: Any) -> None:
    # `int(usage.get(...))` on the raw answer raised on a string count or a non-object usage (the
    # probe then ended "error": no quality verdict, ever), and a negative count credited the budget.
    # A count left out or invalid is estimated (4 characters a token): it once counted 0, so an
    # endpoint reporting no usage made its probes free against the token budget.
    client = answering(_answer(usage))
    messages = [{"role": "user", "content": "x"}]
    answer = await client.chat({"messages": messages})
    assert answer["choices"][0]["message"]["content"] == "hi"
    prompt_estimate, output_estimate = -(-len(json.dumps(messages)) // 4), 1  # "hi": 1 token
    claimed = usage if isinstance(usage, dict) else {}
    prompt = 1_000_000_000 if claimed.get("prompt_tokens") == 1e300 else prompt_estimate
    output = 3 if claimed.get("completion_tokens") == 3 else output_estimate
    assert client.tokens == prompt + output
    assert client.prompt_counts[0][1] is None


async def test_an_endpoint_without_usage_spends_its_probe_token_budget() -> None:
    """Each answer without usage costs its estimate, so the daily token budget still stops the probes."""
    text = "word " * 40  # 200 characters: 50 tokens
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    http = MockHTTPClient(lambda request: MockResponse(status=200, body=orjson.dumps(body)))
    budget = ProbeBudget(requests_per_day=100, tokens_per_day=100, clock=time.time)
    client = ProbeClient(make_endpoint("ep", "m"), http, TIMEOUTS, budget)
    await client.chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 64})
    await client.chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 64})
    with pytest.raises(BudgetExhausted):
        await client.chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 64})
    assert len(http.requests) == 2
    capped = answering(body)
    await capped.chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5})
    assert capped.tokens == -(-len('[{"role": "user", "content": "x"}]') // 4) + 5  # the output at most max_tokens


@pytest.mark.parametrize("body", [[1, 2], "text", 7])
async def test_an_answer_that_is_not_a_json_object_is_unreadable(body: Any) -> None:
    client = answering(body)
    with pytest.raises(ProbeUnavailable):
        await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert client.errors == 1


@pytest.mark.parametrize(("usage", "kept"), [
    ({"prompt_tokens": "n/a", "completion_tokens": 3}, {"completion_tokens": 3}),
    ({"prompt_tokens": -5, "completion_tokens": True, "total_tokens": 7}, {"total_tokens": 7}),
    ({"prompt_tokens": 1e300, "completion_tokens": 2.5, "total_tokens": 2**60}, {}),
    ({"prompt_tokens": 12.0, "completion_tokens": 3, "total_tokens": 15.0}, {"prompt_tokens": 12, "completion_tokens": 3,
                                                                             "total_tokens": 15}),
    ("none", None), ([1], None), (7, None),
])
async def test_an_answer_reaches_the_probe_with_only_its_valid_counts(usage: Any, kept: Any) -> None:
    # The probes read `usage` from the answer: `int(usage.get("prompt_tokens") or 0)` on "n/a" raised,
    # and `.get` on a list did, which ended the probe "error" and hid the answers' text from its rules.
    answer = await answering(_answer(usage)).chat({"messages": [{"role": "user", "content": "x"}]})
    assert answer.get("usage") == kept
    assert answer["choices"][0]["message"]["content"] == "hi"


@pytest.mark.parametrize("choices", ["text", [1], [{"index": 0, "message": "hi"}], {"0": {}}])
async def test_an_answer_whose_choices_cannot_be_read_is_unreadable(choices: Any) -> None:
    client = answering({"object": "chat.completion", "choices": choices})
    with pytest.raises(ProbeUnavailable, match="unreadable"):
        await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert client.errors == 1


@pytest.mark.parametrize("depth", [300, 1010, 100_000])
async def test_an_answer_nested_too_deep_is_the_endpoints_error(depth: int) -> None:
    # 300 and 1,010 levels: readable by orjson, not writable back (255 levels); the TypeError ended
    # the probe "error". 100,000: past what orjson reads at all.
    deep = b'{"choices": [], "x": ' + b"[" * depth + b"]" * depth + b"}"
    client = ProbeClient(make_endpoint("ep", "m"), MockHTTPClient(lambda request: MockResponse(status=200, body=deep)),
                         TIMEOUTS, ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time))  # fmt: skip
    with pytest.raises(ProbeUnavailable):
        await client.chat({"messages": [{"role": "user", "content": "x"}]})
    assert client.errors == 1
