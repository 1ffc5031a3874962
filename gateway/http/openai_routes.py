"""The OpenAI-compatible API. Handlers stay thin: they run the pipeline stages in order.

authenticate -> read + validate -> resolve -> route -> dispatch -> respond/stream -> account
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.catalog import Endpoint
from gateway.http.errors import error_body, error_event
from gateway.pipeline.context import RequestContext
from gateway.pipeline.outcome import Completed, Streaming
from gateway.pipeline.resolve import resolve
from gateway.pipeline.stream import CHAT, Framing, relay
from gateway.pipeline.validate import parse_json, validate
from gateway.state import AppState
from kernel.errors import GatewayError, PayloadTooLarge, ProviderError
from kernel.redact import mask_urls
from kernel.values import Operation

T = TypeVar("T")
log = logging.getLogger("gateway.http")
_JSON = (b"content-type", b"application/json")
_SSE = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    length = _header(scope, b"content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"The request body is {length} bytes; the limit is {limit} bytes.")
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"The request body exceeds the limit of {limit} bytes.")
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def _send_json(send: Send, status: int, body: bytes, headers: dict[str, str]) -> None:
    raw = _raw(headers)
    raw.append(_JSON)
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send: Send, exc: GatewayError, headers: dict[str, str]) -> None:
    merged = {**headers, **exc.headers}
    await _send_json(send, exc.status_code, orjson.dumps(error_body(exc, merged.get("x-request-id"))), merged)


def note_failure(ctx: RequestContext, exc: GatewayError) -> None:
    """The status and class for the record; an upstream's detail (which the client does not see)
    for the record and the log."""
    ctx.status, ctx.error = exc.status_code, type(exc).__name__
    if exc.client_message() != exc.message:
        ctx.error_detail = mask_urls(exc.message)
        log.warning("request %s failed: %s: %s", ctx.request_id, type(exc).__name__, ctx.error_detail)


def account_gone(state: AppState, ctx: RequestContext) -> None:
    """The client left while upstream work ran: that work was cancelled, and is accounted."""
    if ctx.model:
        ctx.status, ctx.error = 499, "ClientDisconnected"
        state.accountant.record(ctx)


async def refuse(
    state: AppState, ctx: RequestContext, send: Send, exc: GatewayError,
    send_error: Callable[[Send, GatewayError, dict[str, str]], Coroutine[Any, Any, None]] = _send_error,
) -> None:
    """Answer a request that failed before any answer (in the API's own error shape) and account it."""
    note_failure(ctx, exc)
    try:
        await send_error(send, exc, ctx.response_headers(state.clock()))
    finally:
        state.accountant.record(ctx)


async def _route_and_dispatch(
    state: AppState, ctx: RequestContext, candidates: tuple[Endpoint, ...]
) -> Completed | Streaming:
    assert state.router is not None  # build_state always makes one
    limits = state.limits
    if limits is not None:
        limits.check(ctx)  # expiry, allowed models: before any routing work
    ordering = await state.router.route(ctx, candidates)
    if limits is not None:
        await limits.admit(ctx, ordering.endpoints)  # rate, parallel and budget, atomically
    return await state.dispatcher.dispatch(ctx, ordering)


WATCH_AFTER = 0.1  # seconds: a request done by then never pays for a watcher task


class _Watch:
    """Watches `receive` for the client going away, from WATCH_AFTER on, and cancels `task` then."""

    __slots__ = ("task", "receive", "watcher", "gone", "finished")

    def __init__(self, task: asyncio.Task[Any], receive: Receive) -> None:
        self.task = task
        self.receive = receive
        self.watcher: asyncio.Future[None] | None = None
        self.gone = self.finished = False

    def start(self) -> None:
        if not self.finished:
            self.watcher = asyncio.ensure_future(self._watch())
            self.watcher.add_done_callback(self._done)

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass

    def _done(self, watcher: asyncio.Future[None]) -> None:
        if not self.finished and not watcher.cancelled() and watcher.exception() is None:
            self.gone = True
            self.task.cancel()


async def _until_disconnect(receive: Receive, work: Coroutine[Any, Any, T]) -> T:
    """Run `work`; if the client disconnects first, cancel it (closing its upstream requests, so
    the upstream stops generating) and raise ClientGone. Streams get their own watcher later."""
    task = asyncio.current_task()
    assert task is not None
    watch = _Watch(task, receive)
    timer = task.get_loop().call_later(WATCH_AFTER, watch.start)
    try:
        return await work
    except asyncio.CancelledError:
        if not watch.gone:
            raise
        task.uncancel()
        raise ClientGone from None
    finally:
        watch.finished = True
        timer.cancel()
        if watch.watcher is not None:
            watch.watcher.cancel()


class InferenceEndpoint:
    """One inference operation as a raw ASGI app: the pipeline stages in order, with no Request or
    Response objects and, for streams, one small task that watches for the client going away
    (instead of a task group per stream). `GatewayApp` calls them directly on an exact path match
    (`fast_routes`); the Starlette routes below serve the rest (405s, trailing slashes)."""

    def __init__(self, op: Operation) -> None:
        self.op = op

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state: AppState = scope["state"]["gw"]
        clock = state.clock
        ctx = RequestContext(request_id=scope["gateway.request_id"], op=self.op, started=clock())
        if state.tracing is not None:  # the client's trace, if it sent one, is the request span's parent
            ctx.traceparent = _header(scope, b"traceparent")
        if state.accountant.keep_bodies:
            ctx.response_parts = []
        try:
            ctx.key_name = state.auth.authenticate(_header(scope, b"authorization"))
            server = state.settings.server
            raw = await read_body(scope, receive, server.max_body_bytes)
            body = validate(
                self.op, parse_json(raw), max_depth=server.max_json_depth, max_prompts=server.max_completion_prompts
            )
            ctx.accept(body)
            candidates = resolve(state.catalog, self.op, ctx.model, body)
            result = await _until_disconnect(receive, _route_and_dispatch(state, ctx, candidates))
        except ClientGone:
            account_gone(state, ctx)
            return
        except GatewayError as exc:
            await refuse(state, ctx, send, exc)
            return
        if isinstance(result, Completed):
            if ctx.response_parts is not None:
                ctx.response_parts.append(result.body)
            # The answer leaves first; the accounting (and routing's feedback) after it.
            try:
                await _send_json(send, 200, result.body, ctx.response_headers(clock()))
            finally:
                state.accountant.record(ctx)
            return
        await self._stream(state, ctx, result, receive, send)

    def relay(
        self,
        state: AppState,
        ctx: RequestContext,
        result: Streaming,
        failed_event: Callable[[GatewayError], bytes],
        on_failure: Callable[[ProviderError], None],
        *,
        framing: Framing = CHAT,
    ) -> AsyncGenerator[bytes, None]:
        """The client's event stream for a committed upstream stream (another API translates here)."""
        return relay(
            ctx, result, error_event=failed_event, on_failure=on_failure, on_finish=state.accountant.record, framing=framing
        )

    async def _stream(
        self,
        state: AppState,
        ctx: RequestContext,
        result: Streaming,
        receive: Receive,
        send: Send,
        *,
        framing: Framing = CHAT,
        error_event: Callable[[GatewayError, str | None], bytes] = error_event,
    ) -> None:
        """`framing` and `error_event`: another API's event shapes over the same relay (Anthropic Messages)."""
        clock = state.clock
        endpoint = result.endpoint

        def on_failure(exc: ProviderError) -> None:
            state.feedback.attempt_failed(ctx, endpoint, clock(), exc)

        headers = _raw(ctx.response_headers(clock()))
        headers.extend(_SSE)
        def failed_event(exc: GatewayError) -> bytes:
            note_failure(ctx, exc)
            return error_event(exc, ctx.request_id)

        stream = self.relay(state, ctx, result, failed_event, on_failure, framing=framing)
        task = asyncio.current_task()
        assert task is not None
        gone = False
        finished = False

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        def on_disconnect(watcher: asyncio.Future[None]) -> None:
            nonlocal gone
            if not finished and not watcher.cancelled() and watcher.exception() is None:
                gone = True
                task.cancel()  # stops relaying: the relay closes the upstream and accounts

        watcher = asyncio.ensure_future(watch())
        watcher.add_done_callback(on_disconnect)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            async for chunk in stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:
                raise
            task.uncancel()
        finally:
            finished = True
            watcher.cancel()
            await stream.aclose()


chat_completions = InferenceEndpoint("chat")
completions = InferenceEndpoint("completions")
embeddings = InferenceEndpoint("embeddings")


def _model_card(model: str, created: int) -> dict[str, object]:
    return {"id": model, "object": "model", "created": created, "owned_by": "llm-gateway"}


async def list_models(request: Request) -> Response:
    state: AppState = request.state.gw
    state.auth.authenticate(request.headers.get("authorization"))
    data = [_model_card(m, state.catalog.created) for m in state.catalog.models()]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")


async def get_model(request: Request) -> Response:
    state: AppState = request.state.gw
    model = request.path_params["model"]
    state.auth.authenticate(request.headers.get("authorization"))
    state.catalog.candidates(model)
    return Response(orjson.dumps(_model_card(model, state.catalog.created)), media_type="application/json")


fast_routes: dict[str, ASGIApp] = {
    "/v1/chat/completions": chat_completions,
    "/v1/completions": completions,
    "/v1/embeddings": embeddings,
}
routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/embeddings", embeddings, methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", get_model, methods=["GET"]),
]
