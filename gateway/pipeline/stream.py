"""Relay a committed upstream stream to the client as SSE.

Never fakes a clean end: if the upstream breaks, times out, sends an error event, or closes
without ``[DONE]``, the client gets one OpenAI-style error event and the stream closes without
``[DONE]`` (the SDK raises `APIError` on it).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Protocol

from gateway.pipeline.context import RequestContext
from gateway.pipeline.estimate import count_events, count_payloads
from gateway.pipeline.outcome import Streaming
from kernel.errors import GatewayError, ProviderError, ProviderStreamError

DONE = b"data: [DONE]\n\n"


def _events(payloads: list[bytes]) -> bytes:
    return b"".join([b"data: " + p + b"\n\n" for p in payloads])


class Framing(Protocol):
    """How payloads reach the client: `frame` for each batch, `end` once after the upstream's [DONE].
    Another API's stream (Anthropic Messages) is a stateful framing over the same chat payloads."""

    def frame(self, payloads: list[bytes]) -> bytes: ...

    def end(self) -> bytes: ...


class ChatFraming:
    """The chat API's own: each payload as a `data:` event, then [DONE]."""

    frame = staticmethod(_events)

    @staticmethod
    def end() -> bytes:
        return DONE


CHAT = ChatFraming()


async def relay(
    ctx: RequestContext,
    streaming: Streaming,
    *,
    error_event: Callable[[GatewayError], bytes],
    on_failure: Callable[[ProviderError], None],
    on_finish: Callable[[RequestContext], object],
    framing: Framing = CHAT,
) -> AsyncGenerator[bytes, None]:
    parts = ctx.response_parts
    trace = ctx.tool_trace  # only for requests with tools
    count = count_events if streaming.native else count_payloads  # passed through: whole SSE events
    try:
        if parts is not None:
            parts.extend(streaming.first)
        if trace is not None:
            trace.feed_chunks(streaming.first)
        count(ctx, streaming.first)  # for an estimate, should no usage come
        first = framing.frame(streaming.first)
        if streaming.done:
            yield first + framing.end()
            return
        if first:
            yield first
        async for chunk in streaming.rest:
            if chunk.usage is not None:
                ctx.usage = chunk.usage
            if chunk.prompt_usage is not None:
                ctx.prompt_usage = chunk.prompt_usage
            if parts is not None:
                parts.extend(chunk.payloads)
            if trace is not None:
                trace.feed_chunks(chunk.payloads)
            if ctx.usage is None or not ctx.usage.completion_reported:  # usage with an output count
                count(ctx, chunk.payloads)  # comes last: text after it needs no counting
            out = framing.frame(chunk.payloads)
            if chunk.done:
                yield out + framing.end()
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
