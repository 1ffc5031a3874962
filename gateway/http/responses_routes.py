"""The OpenAI Responses API in front of Chat Completions upstreams.

`POST /v1/responses` runs the chat pipeline's stages with a translation on each side:

authenticate -> read + validate -> load `previous_response_id` -> translate to a chat request ->
validate (chat) -> resolve -> route -> dispatch -> translate back (+ store) -> respond/stream -> account

so routing, probes, limits, accounting and affinity see an ordinary chat request. An endpoint whose
deployment takes Responses as is (`native: [responses]`, `gateway.pipeline.native`) is sent the
client's body instead (`gateway.translate.responses_native.upstream_body`: its stored conversation
expanded, `store: false`) and its answer or events come back as they are, the gateway's id, model
and `store` put in (`gateway.pipeline.responses_native`); the chat view still drives routing. The stored
responses (`GET`, `DELETE`, `GET .../input_items`) are per gateway key: another key's id is a 404.
`POST .../cancel` only applies to background responses, which this gateway does not make: a
stored id gets a 400 saying so, an unknown one a 404.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.http.errors import error_body
from gateway.http.openai_routes import (
    ClientGone,
    InferenceEndpoint,
    _header,
    _route_and_dispatch,
    _send_json,
    _until_disconnect,
    account_gone,
    note_failure,
    read_body,
    refuse,
)
from gateway.pipeline import responses as stage
from gateway.pipeline import responses_native as native_stage
from gateway.pipeline.context import NativeRequest, RequestContext
from gateway.pipeline.native import native_only
from gateway.pipeline.outcome import Completed, Streaming
from gateway.pipeline.resolve import resolve
from gateway.pipeline.stream import CHAT, Framing
from gateway.pipeline.validate import check_depth, parse_json, validate
from gateway.state import AppState
from gateway.state_store.base import StoreUnavailable
from gateway.state_store.responses import ResponseStore, StoredResponse
from gateway.translate.responses_input import new_id
from gateway.translate.responses_native import carried, items_from_chat, turn_items, upstream_body
from gateway.translate.responses_request import ChatRequest, translate, validate_envelope
from kernel.deployment import NativeApi
from kernel.errors import GatewayError, InvalidRequest, NotFound, ProviderError, Unavailable, UnsupportedParameter

NATIVE: NativeApi = "responses"


def _store_down(exc: StoreUnavailable) -> Unavailable:
    return Unavailable(
        f"The gateway's response store is not answering ({exc}); retry shortly.",
        code="response_store_unavailable",
        headers={"retry-after": "1"},
    )


def _missing(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


async def _load(store: ResponseStore, owner: str | None, response_id: str, param: str | None = None) -> StoredResponse:
    try:
        stored = await store.get(owner, response_id)
    except StoreUnavailable as exc:
        raise _store_down(exc) from None
    if stored is None:
        missing = _missing(response_id)
        missing.param = param or missing.param
        raise missing
    return stored


def _chat_view(raw: dict[str, Any], history: list[dict[str, Any]]) -> tuple[ChatRequest, UnsupportedParameter | None]:
    """The chat view, and what the translation refused: such a request can still go, as it is, to
    an endpoint that takes Responses natively (its view then leaves the refused parts out)."""
    try:
        return translate(raw, history), None
    except UnsupportedParameter as exc:
        try:
            return translate(carried(raw), history), exc
        except GatewayError:
            raise exc from None


class ResponsesEndpoint:
    """`POST /v1/responses` as a raw ASGI app, like the chat endpoint it builds on."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state: AppState = scope["state"]["gw"]
        clock = state.clock
        ctx = RequestContext(request_id=scope["gateway.request_id"], op="chat", api="responses", started=clock())
        if state.tracing is not None:  # the client's trace, if it sent one, is the request span's parent
            ctx.traceparent = _header(scope, b"traceparent")
        if state.accountant.keep_bodies:
            ctx.response_parts = []
        try:
            ctx.key_name = state.auth.authenticate(_header(scope, b"authorization"))
            server = state.settings.server
            raw = parse_json(await read_body(scope, receive, server.max_body_bytes))
            check_depth(raw, server.max_json_depth)
            validate_envelope(raw)
            store = state.responses
            assert store is not None  # build_state makes one
            history: list[dict[str, Any]] = []
            previous: StoredResponse | None = None
            if (previous_id := raw.get("previous_response_id")) is not None:
                previous = await _load(store, ctx.key_name, previous_id, "previous_response_id")
                history = previous.conversation
            request, refused = _chat_view(raw, history)
            body = validate("chat", request.body, max_depth=server.max_json_depth)
            ctx.accept(body)
            turn = stage.Turn(
                request, new_id("resp"), int(self._wall()), ctx.model, history, store if request.echo["store"] else None
            )
            candidates = resolve(state.catalog, "chat", ctx.model, body)
            if any(NATIVE in ep.deployment.native for ep in candidates):  # else nothing passes through
                before = _items(previous)
                ctx.native = NativeRequest.of(NATIVE, upstream_body(raw, before), {})
                turn.items = [*(before or ()), *turn_items(raw.get("input"))]
            if refused is not None:
                candidates = native_only(candidates, refused, ctx.native)
            result = await _until_disconnect(receive, _route_and_dispatch(state, ctx, candidates))
            if isinstance(result, Completed):
                finish = native_stage.complete if result.native else stage.complete
                answer = await finish(ctx, turn, result.body)
        except ClientGone:
            account_gone(state, ctx)
            return
        except GatewayError as exc:
            await refuse(state, ctx, send, exc)
            return
        if isinstance(result, Completed):
            if ctx.response_parts is not None:
                ctx.response_parts.append(answer)
            try:
                await _send_json(send, 200, answer, ctx.response_headers(clock()))
            finally:
                state.accountant.record(ctx)
            return
        await _TurnStream(turn)._stream(state, ctx, result, receive, send)


class _TurnStream(InferenceEndpoint):
    """The chat endpoint's stream loop (disconnects, headers, accounting) around this turn's
    translated relay: one per streamed request."""

    def __init__(self, turn: stage.Turn) -> None:
        super().__init__("chat")
        self.turn = turn

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
        relay = native_stage.relay if result.native else stage.relay
        return relay(
            ctx, self.turn, result, error_event=_error_event(ctx), on_failure=on_failure, on_finish=state.accountant.record
        )


def _items(previous: StoredResponse | None) -> list[dict[str, Any]] | None:
    """The stored conversation as Responses items: as an upstream that took it as is gave them, else
    rebuilt from the chat view (None: no `previous_response_id`)."""
    if previous is None:
        return None
    return previous.items if previous.items is not None else items_from_chat(previous.conversation)


def _error_event(ctx: RequestContext) -> Callable[[GatewayError, stage.ErrorEvents], bytes]:
    def event(exc: GatewayError, events: stage.ErrorEvents) -> bytes:
        note_failure(ctx, exc)
        detail = error_body(exc, ctx.request_id)["error"]
        return events.error(detail["code"], str(detail["message"]), str(detail["type"]), detail["param"])  # type: ignore[arg-type]

    return event


# -- stored responses ---------------------------------------------------------------------


def _json(body: object) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


async def _stored(request: Request) -> StoredResponse:
    state: AppState = request.state.gw
    owner = state.auth.authenticate(request.headers.get("authorization"))
    assert state.responses is not None
    return await _load(state.responses, owner, request.path_params["response_id"])


# These routes raise their GatewayError: the app's one handler answers it (gateway.http.errors).


async def retrieve(request: Request) -> Response:
    return _json((await _stored(request)).response)


async def delete(request: Request) -> Response:
    response_id = request.path_params["response_id"]
    state: AppState = request.state.gw
    owner = state.auth.authenticate(request.headers.get("authorization"))
    assert state.responses is not None
    try:
        found = await state.responses.delete(owner, response_id)
    except StoreUnavailable as exc:
        raise _store_down(exc) from None
    if not found:
        raise _missing(response_id)
    return _json({"id": response_id, "object": "response", "deleted": True})


def _page_params(request: Request) -> tuple[int, str, str | None]:
    query = request.query_params
    raw_limit = query.get("limit", "20")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 100:
        raise InvalidRequest(f"Invalid 'limit': {raw_limit!r}; expected an integer from 1 to 100.", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest(f"Invalid value for 'order': {order!r}. Supported values are: 'asc' and 'desc'.", param="order")
    return int(raw_limit), order, query.get("after")


async def input_items(request: Request) -> Response:
    limit, order, after = _page_params(request)
    stored = await _stored(request)
    items = stored.input_items if order == "asc" else stored.input_items[::-1]
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise InvalidRequest(f"Invalid 'after': no input item {after!r} in this response.", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    body = {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }
    return _json(body)


async def cancel(request: Request) -> Response:
    await _stored(request)
    raise InvalidRequest("Only responses created with background=true can be cancelled.", param="response_id")


create = ResponsesEndpoint()
fast_routes: dict[str, ASGIApp] = {"/v1/responses": create}
routes = [
    Route("/v1/responses", create, methods=["POST"]),
    Route("/v1/responses/{response_id}", retrieve, methods=["GET"]),
    Route("/v1/responses/{response_id}", delete, methods=["DELETE"]),
    Route("/v1/responses/{response_id}/input_items", input_items, methods=["GET"]),
    Route("/v1/responses/{response_id}/cancel", cancel, methods=["POST"]),
]
