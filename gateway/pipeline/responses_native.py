"""The Responses stage for an answer or stream an upstream gave in the Responses API itself
(`native: [responses]`, `gateway.pipeline.native`): relayed as it came, except what the gateway
owns (`gateway.translate.responses_native.own`): the response's id, `model`, `store` and
`previous_response_id`, in the answer and in every event that carries the response
(`response.created`, `response.in_progress`, `response.completed` ...). The finished response is
stored as a translated one is (`gateway.pipeline.responses.keep`: the same size cap and TTL), before
the client sees it finished; a `response.failed` is relayed as it came but not stored, and reported
to the observers as a failed attempt. The other events pass as bytes, unparsed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import orjson

from gateway.pipeline.context import RequestContext
from gateway.pipeline.estimate import count_events
from gateway.pipeline.outcome import Streaming
from gateway.pipeline.responses import ErrorEvents, Turn, keep
from gateway.translate.responses_native import own
from kernel.errors import GatewayError, ProviderError, ProviderServerError, ProviderStreamError
from providers.openai_responses import TERMINAL

# Events whose data holds the whole response (the gateway's id, model and store go in).
CARRIES_RESPONSE = frozenset({"response.created", "response.in_progress", "response.queued", *TERMINAL})
_PREFIX = b"event: "


def _name(raw: bytes) -> str:
    return raw[len(_PREFIX) : raw.index(b"\n")].decode() if raw.startswith(_PREFIX) else ""


async def complete(ctx: RequestContext, turn: Turn, body: bytes) -> bytes:
    response = own(orjson.loads(body), turn.response_id, turn.model, turn.request.echo)
    await keep(ctx, turn, response)
    return orjson.dumps(response)


class NativeEvents:
    """One per stream: the upstream's events with the gateway's part rewritten, and the error event
    a broken stream ends with (its `sequence_number` the next after the upstream's)."""

    def __init__(self, ctx: RequestContext, turn: Turn, endpoint_id: str) -> None:
        self._ctx = ctx
        self._turn = turn
        self._endpoint_id = endpoint_id
        self._seq = 0
        self.response: dict[str, Any] | None = None  # the finished one
        self.failed: ProviderServerError | None = None  # what a response.failed said

    def _data(self, name: str, raw: bytes) -> dict[str, Any]:
        start = raw.find(b"\ndata: ")
        try:
            data = orjson.loads(raw[start + len(b"\ndata: ") :]) if start >= 0 else None
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            raise ProviderStreamError(f"upstream event {name} is not a JSON object", endpoint=self._endpoint_id)
        return data

    async def own(self, raw: bytes) -> bytes:
        name = _name(raw)
        if name not in CARRIES_RESPONSE:
            self._seq += 1
            return raw
        data = self._data(name, raw)
        seq = data.get("sequence_number")
        seq = 0 if seq is None else seq  # absent or null: a server that does not number its events
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ProviderStreamError(f"upstream event {name} has an invalid sequence_number", endpoint=self._endpoint_id)
        self._seq = max(self._seq, seq) + 1
        response = data.get("response")
        if not isinstance(response, dict):
            raise ProviderServerError(f"upstream event {name} carries no response", endpoint=self._endpoint_id)
        own(response, self._turn.response_id, self._turn.model, self._turn.request.echo)
        if name == "response.failed":  # relayed (the SDK raises on it), neither stored nor a success
            error = response.get("error")
            error = error if isinstance(error, dict) else {}
            what = f"{error.get('code') or 'error'}: {error.get('message', '')}"[:500]
            self.failed = ProviderServerError(f"upstream response failed: {what}", endpoint=self._endpoint_id)
        elif name in TERMINAL:
            await keep(self._ctx, self._turn, response)
            self.response = response
        return _PREFIX + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def error(self, code: str | None, message: str, error_type: str, param: str | None = None) -> bytes:
        detail = {"message": message, "type": error_type, "param": param, "code": code}
        data = {
            "type": "error",
            "sequence_number": self._seq,
            "code": code,
            "message": message,
            "param": param,
            "error": detail,
        }
        self._seq += 1
        return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"


async def relay(
    ctx: RequestContext,
    turn: Turn,
    streaming: Streaming,
    *,
    error_event: Callable[[GatewayError, ErrorEvents], bytes],
    on_failure: Callable[[ProviderError], None],
    on_finish: Callable[[RequestContext], object],
) -> AsyncGenerator[bytes, None]:
    events = NativeEvents(ctx, turn, streaming.endpoint.id)
    try:
        batch, done = streaming.first, streaming.done
        while True:
            if ctx.usage is None or not ctx.usage.completion_reported:  # a usage with an output count
                count_events(ctx, batch)  # comes only at the end: until then the output is counted
            out = b"".join([await events.own(raw) for raw in batch])
            if done:
                if ctx.response_parts is not None and events.response is not None:
                    ctx.response_parts.append(orjson.dumps(events.response))
                yield out
                if events.failed is not None:  # the client has the upstream's own account of it
                    ctx.status, ctx.error = events.failed.status_code, type(events.failed).__name__
                    on_failure(events.failed)
                return
            if out:
                yield out
            parsed = await anext(streaming.rest, None)
            if parsed is None:
                raise ProviderStreamError(
                    f"upstream {streaming.endpoint.id} closed the stream before it finished",
                    endpoint=streaming.endpoint.id,
                )
            if parsed.usage is not None:
                ctx.usage = parsed.usage
            batch, done = parsed.payloads, parsed.done
    except ProviderError as exc:
        ctx.status = exc.status_code
        ctx.error = type(exc).__name__
        on_failure(exc)
        yield error_event(exc, events)
    finally:
        streaming.response.close()
        await streaming.rest.aclose()  # type: ignore[attr-defined]
        on_finish(ctx)
