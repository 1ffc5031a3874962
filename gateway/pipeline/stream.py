"""Relay a committed upstream stream to the client as SSE.

Never fakes a clean end: if the upstream breaks, times out, sends an error event, or closes
without ``[DONE]``, the client gets one OpenAI-style error event and the stream closes without
``[DONE]`` (the SDK raises `APIError` on it).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

from gateway.pipeline.context import RequestContext
from gateway.pipeline.outcome import Streaming
from kernel.errors import GatewayError, ProviderError, ProviderStreamError

DONE = b"data: [DONE]\n\n"


def _events(payloads: list[bytes]) -> bytes:
    return b"".join([b"data: " + p + b"\n\n" for p in payloads])


async def relay(
    ctx: RequestContext,
    streaming: Streaming,
    *,
    error_event: Callable[[GatewayError], bytes],
    on_failure: Callable[[ProviderError], None],
    on_finish: Callable[[RequestContext], object],
) -> AsyncGenerator[bytes, None]:
    parts = ctx.response_parts
    trace = ctx.tool_trace  # only for requests with tools
    try:
        if parts is not None:
            parts.extend(streaming.first)
        if trace is not None:
            trace.feed_chunks(streaming.first)
        first = _events(streaming.first)
        if streaming.done:
            yield first + DONE
            return
        if first:
            yield first
        async for chunk in streaming.rest:
            if chunk.usage is not None:
                ctx.usage = chunk.usage
            if parts is not None:
                parts.extend(chunk.payloads)
            if trace is not None:
                trace.feed_chunks(chunk.payloads)
            out = _events(chunk.payloads)
            if chunk.done:
                yield out + DONE
                return
            if out:
                yield out
        raise ProviderStreamError(
            f"upstream {streaming.endpoint.id} closed the stream before it finished", endpoint=streaming.endpoint.id
        )
    except ProviderError as exc:
        ctx.status = exc.status_code
        ctx.error = type(exc).__name__
        on_failure(exc)
        yield error_event(exc)
    finally:
        streaming.response.close()
        await streaming.rest.aclose()  # type: ignore[attr-defined]
        on_finish(ctx)
