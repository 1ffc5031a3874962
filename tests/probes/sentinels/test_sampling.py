"""The sentinels' sampler stops when it is stopped: a request that raises (a spent budget, a bug)
or a cancel of the batch leaves no request of it running or starting afterwards."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from probes.budget import BudgetExhausted
from probes.sentinels.sampling import Sampler

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
