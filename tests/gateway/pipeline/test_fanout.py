"""Fan-out without streaming: the parts' own usages, as their adapter read them, add up."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson

from gateway.catalog import Endpoint
from gateway.pipeline.account import Accountant
from gateway.pipeline.context import RequestContext
from gateway.pipeline.fanout import fan_out
from gateway.pipeline.outcome import Completed
from kernel.deployment import Price
from kernel.values import Usage


async def test_parts_that_counted_no_prompt_are_billed_the_estimate_for_each_part() -> None:
    ctx = RequestContext(request_id="r", op="chat", started=0.0, body={"model": "m", "n": 2}, model="m", endpoint_id="p/m")
    ctx.route = SimpleNamespace(features=SimpleNamespace(prompt_tokens=50, max_output_tokens=None))  # type: ignore[assignment]
    ctx.committed = True

    async def attempt(ctx: RequestContext, endpoint: Endpoint, body: dict[str, Any]) -> Completed:
        # an Anthropic answer without a prompt count, translated: its chat body says prompt_tokens 0
        ctx.usage = Usage(0, 3, prompt_reported=False)
        chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 3, "total_tokens": 3}}
        return Completed(orjson.dumps(chat))

    endpoint: Any = SimpleNamespace(id="p/m")
    merged = await fan_out(ctx, endpoint, 2, attempt)
    assert isinstance(merged, Completed) and len(orjson.loads(merged.body)["choices"]) == 2
    record = Accountant(lambda _: Price(input=1.0, output=1.0), lambda: 1.0).record(ctx)
    assert (record.prompt_tokens, record.completion_tokens) == (100, 6) and record.usage_estimated


async def test_a_part_without_usage_is_estimated_from_its_own_text_beside_the_counted_parts() -> None:
    """Parts that counted 100 + 20 each, one that reported nothing: its prompt is a counted part's,
    its output its own 40 characters (10 tokens), so 300 + 50 (the whole was once estimated: 150 + 30)."""
    ctx = RequestContext(request_id="r", op="chat", started=0.0, body={"model": "m", "n": 3}, model="m", endpoint_id="p/m")
    ctx.route = SimpleNamespace(features=SimpleNamespace(prompt_tokens=50, max_output_tokens=None))  # type: ignore[assignment]
    ctx.committed = True
    reported = iter([Usage(100, 20), None, Usage(100, 20)])

    async def attempt(ctx: RequestContext, endpoint: Endpoint, body: dict[str, Any]) -> Completed:
        ctx.usage = next(reported)
        chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 40}}]}
        return Completed(orjson.dumps(chat))

    endpoint: Any = SimpleNamespace(id="p/m")
    await fan_out(ctx, endpoint, 3, attempt)
    assert ctx.usage is not None and not ctx.usage.completion_reported
    record = Accountant(lambda _: Price(input=1.0, output=1.0), lambda: 1.0).record(ctx)
    assert (record.prompt_tokens, record.completion_tokens, record.usage_estimated) == (300, 50, True)
    assert ctx.usage_counted is not None and ctx.usage_counted.completion_tokens == 40  # settled in full
