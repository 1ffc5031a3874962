"""Relay a committed upstream stream to the client as SSE.

Never fakes a clean end: if the upstream breaks, times out, sends an error event, or closes
without ``[DONE]``, the client gets one OpenAI-style error event and the stream closes without
``[DONE]`` (the SDK raises `APIError` on it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from gateway.errors import GatewayError, ProviderError, ProviderStreamError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.dispatch import Streaming

DONE = b"data: [DONE]\n\n"


async def relay(
    ctx: RequestContext,
    streaming: Streaming,
    *,
    error_event: Callable[[GatewayError], bytes],
    on_failure: Callable[[ProviderError], None],
    on_finish: Callable[[RequestContext], None],
) -> AsyncIterator[bytes]:
    parts = ctx.response_parts
    try:
        for payload in streaming.first:
            if parts is not None:
                parts.append(payload)
            yield b"data: " + payload + b"\n\n"
        if streaming.done:
            yield DONE
            return
        async for chunk in streaming.rest:
            if chunk.usage is not None:
                ctx.usage = chunk.usage
            if parts is not None:
                parts.extend(chunk.payloads)
            for payload in chunk.payloads:
                yield b"data: " + payload + b"\n\n"
            if chunk.done:
                yield DONE
                return
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
