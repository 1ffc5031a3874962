"""Dispatch: try the ordered candidates, retrying and falling back before the first byte.

A request is committed to an endpoint only once that endpoint has produced a complete answer
(non-streaming) or its first stream event (streaming). Until then every retryable failure is
retried on the same endpoint with backoff (honouring Retry-After), then the next candidate is
tried. After commit, failures are the stream stage's business: it never retries, it reports.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any

from gateway.catalog import Endpoint
from gateway.pipeline import native
from gateway.pipeline.context import RequestContext
from gateway.pipeline.estimate import count_payloads
from gateway.pipeline.fanout import fan_out, fan_out_count
from gateway.pipeline.observe import Observers, RequestObserver
from gateway.pipeline.outcome import Completed, Streaming
from gateway.routing.backoff import clamp_retry_after, retry_delay
from gateway.routing.order import Ordering
from gateway.routing.settings import RetryConfig
from kernel.errors import AllAttemptsFailed, ProviderError, ProviderStreamError, ProviderTimeout, Unavailable
from providers.base import ParsedChunk, StreamTranslator
from providers.call import UNENCODABLE, call, open_call
from providers.http import HTTPClient, Timeouts, UpstreamResponse
from providers.sse import SSEDecoder

log = logging.getLogger("gateway.dispatch")


async def parse_stream(
    response: UpstreamResponse, translator: StreamTranslator, endpoint: str = ""
) -> AsyncGenerator[ParsedChunk, None]:
    """One merged chunk per upstream read: events that arrived together leave together, in one
    write to the client (one transport write per event cost about half the CPU of a stream).
    The exception is the first event with a payload: it leaves alone, at once, so the time to
    the first token does not wait for the rest of a burst to be translated."""
    decoder = SSEDecoder()
    first_sent = False
    async for raw in response.chunks():
        merged: ParsedChunk | None = None
        try:
            for event, data in _decoded(decoder, raw, first_pending=not first_sent):
                try:
                    chunk = translator.feed(event, data)
                except UNENCODABLE:
                    raise ProviderStreamError(
                        f"upstream {endpoint} sent a stream event nested too deep to pass on", endpoint=endpoint
                    ) from None
                if merged is None:
                    merged = chunk
                else:
                    merged.payloads.extend(chunk.payloads)
                    merged.usage = chunk.usage if chunk.usage is not None else merged.usage
                    merged.prompt_usage = chunk.prompt_usage or merged.prompt_usage
                    merged.done = chunk.done
                if chunk.done:
                    break
                if not first_sent and merged.payloads:
                    first_sent = True
                    yield merged
                    merged = None
        except ProviderError:
            if merged is not None and merged.payloads:
                yield merged  # what arrived before the failure still reaches the client first
            raise
        if merged is not None:
            yield merged


def _decoded(decoder: SSEDecoder, raw: bytes, *, first_pending: bool) -> Iterator[tuple[str | None, bytes]]:
    """The events of one read. Until the first event has gone out, a read holding several is
    decoded in two steps, the first event alone, so the rest of a burst is not split into lines
    before it leaves."""
    if first_pending:
        cut = raw.find(b"\n\n") + 2
        if 1 < cut < len(raw):
            yield from decoder.feed(raw[:cut])
            raw = raw[cut:]
    yield from decoder.feed(raw)


def _restarting(ctx: RequestContext) -> Unavailable:
    return Unavailable(
        f"No endpoint for `{ctx.model}` is available right now (all are starting or restarting); retry shortly.",
        headers={"retry-after": "1"},
    )


class Dispatcher:
    def __init__(
        self,
        client: HTTPClient,
        retry: RetryConfig,
        timeouts: Timeouts,
        *,
        clock: Callable[[], float],
        rng: random.Random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        observer: RequestObserver | None = None,
    ) -> None:
        # Told each request's start and each attempt (`gateway.pipeline.observe`): the breaker,
        # routing's in-flight counts and feedback, the tool-call monitor's trace.
        self.observer: RequestObserver = observer if observer is not None else Observers()
        self._client = client
        self._retry = retry
        self._timeouts = timeouts
        self._clock = clock
        self._rng = rng
        self._sleep = sleep

    async def dispatch(self, ctx: RequestContext, ordering: Ordering) -> Completed | Streaming:
        if not ordering.endpoints:
            raise _restarting(ctx)
        ctx.fail_open = ordering.fail_open
        observer = self.observer
        observer.request_started(ctx)
        if ordering.fail_open:
            log.warning("every endpoint for %s is ruled out (%s); trying them anyway", ctx.model, ordering.fail_open)
        last: ProviderError | None = None
        for endpoint in ordering.endpoints:
            for attempt in range(self._retry.attempts_per_endpoint):
                if ctx.attempts >= self._retry.max_attempts:
                    raise self._exhausted(ctx, last)
                ctx.attempts += 1
                ctx.endpoint_id = endpoint.id
                observer.attempt_started(ctx, endpoint, self._clock())
                try:
                    result = await self._attempt(ctx, endpoint)
                except BaseException as exc:
                    if isinstance(exc, ProviderError):
                        exc.retry_after = clamp_retry_after(exc.retry_after, self._retry.max_retry_after_block)
                    observer.attempt_failed(ctx, endpoint, self._clock(), exc)
                    if not isinstance(exc, ProviderError):
                        raise
                    last = exc
                    if not exc.fallback:
                        raise
                    log.info("attempt %d on %s failed: %s", ctx.attempts, endpoint.id, exc.message)
                    # A local engine that died meanwhile is restarting: retrying it now cannot help.
                    if not exc.retryable or attempt + 1 >= self._retry.attempts_per_endpoint or not endpoint.is_ready():
                        break
                    delay = retry_delay(attempt, exc.retry_after, self._retry, self._rng)
                    if delay is None:
                        break
                    ctx.waited += delay
                    await self._sleep(delay)
                    continue
                ctx.committed = True
                observer.attempt_committed(ctx, endpoint, self._clock())
                if result.native:  # the tool-call monitor reads chat answers; this one is not
                    ctx.tool_trace = None
                if ctx.tool_trace is not None and isinstance(result, Completed):
                    ctx.tool_trace.feed_body(result.body)
                return result
        if not any(ep.is_ready() for ep in ordering.endpoints):
            raise _restarting(ctx)  # they failed because they died: say so, as a retryable 503
        raise self._exhausted(ctx, last)


    @property
    def timeouts(self) -> Timeouts:
        return self._timeouts

    def _exhausted(self, ctx: RequestContext, last: ProviderError | None) -> AllAttemptsFailed:
        detail = f": {last.message}" if last else ""
        return AllAttemptsFailed(
            f"All {ctx.attempts} attempts for `{ctx.model}` failed{detail}",
            last=last,
            attempts=ctx.attempts,
            model=ctx.model,
        )

    async def _attempt(self, ctx: RequestContext, endpoint: Endpoint) -> Completed | Streaming:
        # What an earlier, failed attempt reported or had counted reached no client: its text is not
        # this answer's, nor its fan-out's prompt count (gateway.pipeline.estimate).
        ctx.usage = ctx.prompt_usage = None
        ctx.output_chars = ctx.output_pieces = 0
        ctx.prompt_requests = 1
        if (n := fan_out_count(ctx, endpoint)) > 1:  # the endpoint ignores `n`: one request per choice
            return await fan_out(ctx, endpoint, n, self._send)
        return await self._send(ctx, endpoint, ctx.body_for(endpoint.id))

    async def _send(self, ctx: RequestContext, endpoint: Endpoint, body: dict[str, Any]) -> Completed | Streaming:
        passed = native.takes(ctx, endpoint)
        if passed:
            request = native.request(ctx, endpoint)
        else:
            request = endpoint.adapter.build_request(endpoint.target, ctx.op, body, ctx.stream)
        if ctx.spans is not None:  # tracing is on: the attempt's W3C trace context goes with it
            request = replace(request, headers={**request.headers, **ctx.spans.upstream_headers})
        begin = self._clock()
        try:
            if not ctx.stream:
                if passed:
                    parsed = await native.call(self._client, self._timeouts, ctx, endpoint, request)
                else:
                    parsed = await call(self._client, self._timeouts, endpoint, ctx.op, request, sent=body)
                ctx.usage = parsed.usage
                if parsed.usage is None or not parsed.usage.completion_reported:  # for an estimate
                    count_payloads(ctx, [parsed.body])  # (gateway.pipeline.estimate)
                return Completed(parsed.body, native=passed)
            response = await open_call(self._client, self._timeouts, endpoint, request)
            if passed:
                translator = native.stream_translator(ctx, endpoint)
            else:
                translator = endpoint.adapter.stream_translator(endpoint.target, ctx.op, ctx.body)
            return await self._first_event(ctx, endpoint, response, translator, passed=passed)
        finally:
            ctx.waited += self._clock() - begin

    async def _first_event(
        self, ctx: RequestContext, endpoint: Endpoint, response: UpstreamResponse, translator: StreamTranslator, *, passed: bool
    ) -> Streaming:
        events = parse_stream(response, translator, endpoint.id)
        first: list[bytes] = []
        done = False
        try:
            async with asyncio.timeout(self._timeouts.first_byte):
                async for chunk in events:
                    if chunk.usage is not None:
                        ctx.usage = chunk.usage
                    if chunk.prompt_usage is not None:
                        ctx.prompt_usage = chunk.prompt_usage
                    first.extend(chunk.payloads)
                    if chunk.done:
                        done = True
                        break
                    if first:
                        break
                else:
                    raise ProviderStreamError(
                        f"upstream {endpoint.id} closed the stream before sending any event", endpoint=endpoint.id
                    )
        except TimeoutError:
            response.close()
            await events.aclose()
            raise ProviderTimeout(f"upstream {endpoint.id} timed out waiting for the first event", endpoint=endpoint.id) from None
        except BaseException:
            response.close()
            await events.aclose()
            raise
        ctx.ttft = self._clock() - ctx.started
        return Streaming(endpoint, first, events, done, response, native=passed)
