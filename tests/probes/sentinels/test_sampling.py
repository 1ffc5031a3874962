"""The sentinels' sampler stops when it is stopped: a request that raises (a spent budget, a bug)
or a cancel of the batch leaves no request of it running or starting afterwards."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from probes.budget import BudgetExhausted, ProbeBudget
from probes.client import ProbeClient
from probes.sentinels.sampling import Sampler
from providers.http import Timeouts
from providers.http_mock import MockHTTPClient, MockResponse
from tests.fakes.catalog import make_endpoint

DELAY = 0.01


class Counting:
    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.started = 0
        self.in_flight = 0

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        self.started += 1
        if self.started == self.fail_at:
            raise BudgetExhausted("spent")
        self.in_flight += 1
        try:
            await asyncio.sleep(DELAY)
        finally:
            self.in_flight -= 1
        return {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


BODIES = [{"messages": [{"role": "user", "content": str(i)}]} for i in range(60)]


async def test_a_request_that_raises_stops_the_batch() -> None:
    client = Counting(fail_at=6)
    with pytest.raises(BudgetExhausted):
        await Sampler(client, concurrency=4).chat_many(BODIES)
    stopped = client.started
    await asyncio.sleep(2 * DELAY * len(BODIES))
    assert client.started == stopped < len(BODIES) and client.in_flight == 0


async def test_a_cancelled_batch_sends_nothing_more() -> None:
    client = Counting()
    task = asyncio.create_task(Sampler(client, concurrency=4).chat_many(BODIES))
    while client.started < 8:
        await asyncio.sleep(DELAY / 4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stopped = client.started
    await asyncio.sleep(2 * DELAY * len(BODIES))
    assert client.started == stopped and client.in_flight == 0


async def test_answers_with_hostile_counts_are_sampled_not_fatal() -> None:
    # An endpoint whose usage counts are strings or whose usage is a list once raised out of the batch
    # (the sentinels ended "error", so a looping endpoint with such counts escaped the loop rule).
    usages: list[Any] = [{"prompt_tokens": "n/a", "completion_tokens": 2}, [1], {"prompt_tokens": 4}]
    answers = iter(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
         "usage": u} for u in usages
    )  # fmt: skip
    http = MockHTTPClient(lambda request: MockResponse(status=200, body=orjson.dumps(next(answers))))
    budget = ProbeBudget(requests_per_day=100, tokens_per_day=0, clock=time.time)
    timeouts = Timeouts(connect=1, first_byte=1, between_chunks=1, total=1)
    sampler = Sampler(ProbeClient(make_endpoint("ep", "m"), http, timeouts, budget), concurrency=1)
    got = await sampler.chat_many(BODIES[:3])
    assert [a["choices"][0]["message"]["content"] for a in got if a] == ["ok", "ok", "ok"]
    assert sampler.errors == 0 and sampler.tokens == 2 + 4
