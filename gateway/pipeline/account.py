"""Account for each finished request: usage, cost, latency, outcome.

In memory and O(1) per request. The record then goes to the request's observers' `finished`
(`gateway.pipeline.observe`): routing's feedback, the tool-call monitor, metrics, persistence (a
bounded queue drained off the hot path), as peers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.pipeline.context import RequestContext
from gateway.pipeline.estimate import counted_part, estimated_usage, with_estimates
from kernel.deployment import Price
from kernel.records import RequestRecord
from kernel.values import Usage

if TYPE_CHECKING:
    from gateway.pipeline.observe import RequestObserver


def cost_usd(usage: Usage | None, price: Price) -> float:
    if usage is None:
        return 0.0
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    uncached = usage.prompt_tokens - cached
    return (uncached * price.input + cached * price.cached + usage.completion_tokens * price.output) / 1_000_000


@dataclass(slots=True)
class EndpointTotals:
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class Accountant:
    def __init__(
        self,
        prices: Callable[[str], Price | None],
        clock: Callable[[], float],
        observer: RequestObserver | None = None,
        *,
        keep_bodies: bool = False,
    ) -> None:
        self._prices = prices
        self._clock = clock
        # Told about every finished request, with its record.
        self.observer = observer
        self.keep_bodies = keep_bodies
        self.totals: dict[str, EndpointTotals] = {}

    def record(self, ctx: RequestContext) -> RequestRecord:
        now = self._clock()
        price = self._prices(ctx.endpoint_id) if ctx.endpoint_id else None
        if ctx.usage is None and ctx.committed:  # answered, but no usage came: not free
            ctx.usage_counted, ctx.usage, ctx.usage_estimated = counted_part(ctx, None), estimated_usage(ctx), True
        elif ctx.usage is not None and (estimated := with_estimates(ctx, ctx.usage)) is not None:
            # A count left out (the prompt's, the output's): the upstream's own counts are kept apart.
            ctx.usage_counted, ctx.usage, ctx.usage_estimated = counted_part(ctx, ctx.usage), estimated, True
        usage = ctx.usage
        record = RequestRecord(
            request_id=ctx.request_id,
            key_name=ctx.key_name,
            model=ctx.model,
            endpoint_id=ctx.endpoint_id,
            op=ctx.op,
            stream=ctx.stream,
            attempts=ctx.attempts,
            status=ctx.status,
            error=ctx.error,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            cached_tokens=usage.cached_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cost_usd=cost_usd(usage, price) if price else 0.0,
            ttft_s=ctx.ttft,
            latency_s=now - ctx.started,
            overhead_ms=ctx.overhead_ms(now),
            error_detail=ctx.error_detail,
            usage_estimated=ctx.usage_estimated,
            api=ctx.api or ctx.op,
        )
        if self.keep_bodies:
            record.request_body = ctx.body
            record.response_body = b"\n".join(ctx.response_parts) if ctx.response_parts else None
        if record.endpoint_id:
            totals = self.totals.get(record.endpoint_id)
            if totals is None:
                totals = self.totals[record.endpoint_id] = EndpointTotals()
            totals.requests += 1
            totals.errors += record.status >= 400
            totals.prompt_tokens += record.prompt_tokens
            totals.cached_tokens += record.cached_tokens
            totals.completion_tokens += record.completion_tokens
            totals.cost_usd += record.cost_usd
        if self.observer is not None:
            self.observer.finished(ctx, record)
        return record
