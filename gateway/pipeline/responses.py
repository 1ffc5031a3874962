"""The Responses API's stage after dispatch: a committed chat answer becomes a Responses answer.

`complete` translates a non-streamed chat completion; `relay` relays a committed chat stream as
the Responses event stream (`gateway.translate.responses_stream`). Either stores the response
when asked (`store`), before the client sees it completed, so a `previous_response_id` sent right
after finds it on any replica. Like the chat relay, a stream that breaks ends with an `error`
event and no completion: the SDKs raise, nothing looks finished.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.pipeline.context import RequestContext
from gateway.pipeline.estimate import count_chunk
from gateway.pipeline.outcome import Streaming
from gateway.state_store.base import StoreUnavailable
from gateway.state_store.responses import ResponseStore, StoredResponse
from gateway.translate.responses_output import assistant_message, response_from_chat
from gateway.translate.responses_request import ChatRequest
from gateway.translate.responses_stream import ResponseStream
from kernel.errors import GatewayError, ProviderError, ProviderStreamError

log = logging.getLogger("gateway.responses")


class ErrorEvents(Protocol):
    """What a broken stream's last event comes from (`ResponseStream`, or a passed-through stream's)."""

    def error(self, code: str | None, message: str, error_type: str, param: str | None = None) -> bytes: ...


@dataclass(slots=True)
class Turn:
    """One Responses request on its way through the pipeline."""

    request: ChatRequest
    response_id: str
    created_at: int
    model: str
    history: list[dict[str, Any]]  # the stored conversation it continues ([] without one)
    store: ResponseStore | None  # None: `store: false`
    # For a request an endpoint may take as is: the conversation so far and this turn's input as
    # Responses items, stored beside the chat view (`StoredResponse.items`); None: the chat view only.
    items: list[dict[str, Any]] | None = None


async def keep(ctx: RequestContext, turn: Turn, response: dict[str, Any]) -> None:
    """Store the finished response with the conversation so far; a store outage is logged, the
    client still gets its answer (a later retrieve or continuation of it is then a 404).

    One over the store's size cap (`responses.max_stored_bytes`) is not stored either, and the
    answer says so: its `store` is false, as for a request that asked not to be stored. That also
    ends a `previous_response_id` chain that outgrew the cap: each stored response holds the whole
    conversation so far, so none is stored past the cap and continuing it is a 404."""
    if turn.store is None:
        return
    conversation = [*turn.history, *turn.request.turn]
    if (message := assistant_message(response)) is not None:
        conversation.append(message)
    items = None if turn.items is None else [*turn.items, *response.get("output", ())]
    try:
        size = await turn.store.put(ctx.key_name, StoredResponse(response, turn.request.input_items, conversation, items))
    except StoreUnavailable as exc:
        log.warning("request %s: could not store response %s: %s", ctx.request_id, turn.response_id, exc)
        return
    if size is not None:
        response["store"] = False
        log.info(
            "request %s: response %s not stored: %d bytes, over responses.max_stored_bytes (%d)",
            ctx.request_id,
            turn.response_id,
            size,
            turn.store.max_bytes,
        )


async def complete(ctx: RequestContext, turn: Turn, chat_body: bytes) -> bytes:
    chat = orjson.loads(chat_body)
    response = response_from_chat(
        chat, turn.response_id, turn.created_at, turn.model, turn.request.echo, turn.request.logprobs
    )
    await keep(ctx, turn, response)
    return orjson.dumps(response)


def _chunks(payloads: list[bytes]) -> list[dict[str, Any]]:
    return [obj for obj in map(orjson.loads, payloads) if isinstance(obj, dict)]


async def relay(
    ctx: RequestContext,
    turn: Turn,
    streaming: Streaming,
    *,
    error_event: Callable[[GatewayError, ErrorEvents], bytes],
    on_failure: Callable[[ProviderError], None],
    on_finish: Callable[[RequestContext], object],
) -> AsyncGenerator[bytes, None]:
    parts = ctx.response_parts
    trace = ctx.tool_trace  # only for requests with tools: it reads the chat chunks
    events = ResponseStream(turn.response_id, turn.created_at, turn.model, turn.request.echo, logprobs=turn.request.logprobs)
    try:
        batches = [(streaming.first, streaming.done)]
        out = events.start()
        while True:
            for payloads, done in batches:
                if trace is not None:
                    trace.feed_chunks(payloads)
                for chunk in _chunks(payloads):
                    count_chunk(ctx, chunk)  # for an estimate, should no usage come
                    out += events.feed(chunk)
                if done:
                    end = events.close()
                    await keep(ctx, turn, events.response)
                    end += events.completed()
                    if parts is not None:
                        parts.append(orjson.dumps(events.response))
                    yield out + end
                    return
            if out:
                yield out
                out = b""
            parsed = await anext(streaming.rest, None)
            if parsed is None:
                raise ProviderStreamError(
                    f"upstream {streaming.endpoint.id} closed the stream before it finished", endpoint=streaming.endpoint.id
                )
            if parsed.usage is not None:
                ctx.usage = parsed.usage
            batches = [(parsed.payloads, parsed.done)]
    except ProviderError as exc:
        ctx.status = exc.status_code
        ctx.error = type(exc).__name__
        on_failure(exc)
        yield error_event(exc, events)
    finally:
        streaming.response.close()
        await streaming.rest.aclose()  # type: ignore[attr-defined]
        on_finish(ctx)
