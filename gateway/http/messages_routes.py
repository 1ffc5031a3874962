"""The Anthropic Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`) in front of
chat upstreams. The request is translated (`gateway.translate.anthropic_request`) into the internal
chat request, which then takes the same stages as /v1/chat/completions (resolve, route, dispatch,
relay, account); the answer or stream is translated back (`gateway.translate.anthropic_response`).
An endpoint whose deployment takes Messages as is (`native: [messages]`, `gateway.pipeline.native`)
is sent the client's own body instead, and its answer or events reach the client untouched; the chat
view still drives routing, limits and affinity.

Keys: the gateway's own, in `x-api-key` (what the SDK and Claude Code send with an API key) or as
`Authorization: Bearer` (ANTHROPIC_AUTH_TOKEN). `anthropic-version` and `anthropic-beta` are accepted
(the betas go on to endpoints that take Messages as is). Errors are Anthropic's shape (`gateway.http.anthropic_errors`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.catalog import Endpoint
from gateway.http.anthropic_errors import anthropic_error_body, anthropic_error_event
from gateway.http.openai_routes import (
    ClientGone,
    InferenceEndpoint,
    _header,
    _route_and_dispatch,
    _send_json,
    _until_disconnect,
    account_gone,
    read_body,
    refuse,
)
from gateway.pipeline.context import NativeRequest, RequestContext
from gateway.pipeline.count import count_prompt, counting_endpoint
from gateway.pipeline.estimate import routed_prompt_tokens
from gateway.pipeline.native import PASSTHROUGH, native_only
from gateway.pipeline.outcome import Completed
from gateway.pipeline.resolve import resolve
from gateway.pipeline.stream import Framing
from gateway.pipeline.validate import _depth as check_depth
from gateway.pipeline.validate import parse_json
from gateway.state import AppState
from gateway.translate.anthropic_request import ChatRequest, carried, to_chat
from gateway.translate.anthropic_response import MessagesStream, new_message_id, to_message
from kernel.errors import AuthenticationFailed, GatewayError, ProviderError, UnsupportedParameter

log = logging.getLogger("gateway.messages")

# How count_tokens counted, said in a header: the model's own tokenizer where an endpoint of it
# counts (llama-server, Anthropic), else the gateway's own, an estimate for any other tokenizer.
COUNT_METHOD = "estimate; cl100k_base (the gateway's offline tokenizer, not the model's)"
EXACT_METHOD = "exact; counted by endpoint {}"


def authenticate(state: AppState, scope: Scope) -> str | None:
    """The key's name (None under open access): the gateway key in `x-api-key` or as a Bearer token.
    With both headers, either may hold it (Claude Code sends ANTHROPIC_API_KEY as x-api-key beside
    ANTHROPIC_AUTH_TOKEN as Bearer); without a valid one the request fails."""
    api_key = _header(scope, b"x-api-key")
    authorization = _header(scope, b"authorization")
    if not api_key and not authorization:
        try:
            return state.auth.authenticate(None)
        except AuthenticationFailed as exc:
            raise AuthenticationFailed(
                "You didn't provide an API key: send the gateway key in the x-api-key header "
                "(or as Authorization: Bearer YOUR_KEY)."
            ) from exc
    if api_key:
        try:
            return state.auth.authenticate(f"Bearer {api_key}")
        except AuthenticationFailed:
            if not authorization:
                raise
    return state.auth.authenticate(authorization)


async def _send_error(send: Send, exc: GatewayError, headers: dict[str, str]) -> None:
    merged = {**headers, **exc.headers}
    await _send_json(send, exc.status_code, orjson.dumps(anthropic_error_body(exc, merged.get("x-request-id"))), merged)


# The client's headers an upstream that takes Messages as is may get (`gateway.pipeline.native`).
NATIVE_HEADERS = (b"anthropic-beta",)


async def _body(state: AppState, scope: Scope, receive: Receive) -> dict[str, Any]:
    server = state.settings.server
    raw = await read_body(scope, receive, server.max_body_bytes)
    body = parse_json(raw)
    check_depth(body, server.max_json_depth)
    return body


def _chat_view(body: dict[str, Any], *, counting: bool = False) -> tuple[ChatRequest, UnsupportedParameter | None]:
    """The chat view, and what the translation refused: such a request can still go, as it is, to
    an endpoint that takes Messages natively (its view then holds the refused parts as text)."""
    try:
        return to_chat(body, counting=counting), None
    except UnsupportedParameter as exc:
        try:
            return to_chat(carried(body), counting=counting), exc
        except GatewayError:
            raise exc from None


def _native(scope: Scope, body: dict[str, Any]) -> NativeRequest:
    headers = {name.decode(): value for name in NATIVE_HEADERS if (value := _header(scope, name))}
    return NativeRequest.of("messages", body, headers)


class MessagesEndpoint(InferenceEndpoint):
    """POST /v1/messages: the chat pipeline between two translations."""

    def __init__(self) -> None:
        super().__init__("chat")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state: AppState = scope["state"]["gw"]
        clock = state.clock
        ctx = RequestContext(request_id=scope["gateway.request_id"], op="chat", api="messages", started=clock())
        if state.tracing is not None:  # the client's trace, if it sent one, is the request span's parent
            ctx.traceparent = _header(scope, b"traceparent")
        if state.accountant.keep_bodies:
            ctx.response_parts = []
        try:
            ctx.key_name = authenticate(state, scope)
            body = await _body(state, scope, receive)
            request, refused = _chat_view(body)
            ctx.body, ctx.model, ctx.stream, ctx.prefs = request.body, request.model, request.stream, request.prefs
            candidates = resolve(state.catalog, "chat", ctx.model, ctx.body)
            if any("messages" in ep.deployment.native for ep in candidates):  # else nothing passes through
                ctx.native = _native(scope, body)
            if refused is not None:
                candidates = native_only(candidates, refused, ctx.native)
            result = await _until_disconnect(receive, _route_and_dispatch(state, ctx, candidates))
        except ClientGone:
            account_gone(state, ctx)
            return
        except GatewayError as exc:
            await refuse(state, ctx, send, exc, send_error=_send_error)
            return
        message_id = new_message_id()
        if isinstance(result, Completed):
            if ctx.response_parts is not None:
                ctx.response_parts.append(result.body)
            if result.native:  # the upstream's own Message
                answer = result.body
            else:
                message = to_message(
                    orjson.loads(result.body),
                    model=request.model,
                    message_id=message_id,
                    stop_sequences=request.stop_sequences,
                    thinking=request.thinking,
                    input_tokens=routed_prompt_tokens(ctx) or 0,
                )
                answer = orjson.dumps(message)
            try:
                await _send_json(send, 200, answer, ctx.response_headers(clock()))
            finally:
                state.accountant.record(ctx)
            return
        framing: Framing = PASSTHROUGH
        if not result.native:
            framing = MessagesStream(
                model=request.model,
                message_id=message_id,
                input_tokens=routed_prompt_tokens(ctx) or 0,
                stop_sequences=request.stop_sequences,
                thinking=request.thinking,
            )
        await self._stream(state, ctx, result, receive, send, framing=framing, error_event=anthropic_error_event)


class CountTokensEndpoint:
    """POST /v1/messages/count_tokens: the translated prompt counted by an endpoint of the model
    that counts with its own tokenizer and chat template (`gateway.pipeline.count`), exact; else
    (or when that endpoint fails) with cl100k_base, the way the gateway counts chat prompts for
    routing: an estimate for any other tokenizer. The `x-gateway-token-count` header says which."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _count_tokens(scope, receive, send)


async def _count_tokens(scope: Scope, receive: Receive, send: Send) -> None:
    state: AppState = scope["state"]["gw"]
    headers = {"x-request-id": scope["gateway.request_id"]}
    try:
        ctx = RequestContext(request_id=headers["x-request-id"], op="chat", started=state.clock())
        ctx.key_name = authenticate(state, scope)
        raw = await _body(state, scope, receive)
        request, refused = _chat_view(raw, counting=True)
        candidates = resolve(state.catalog, "chat", request.model, request.body)  # an unknown model is a 404
        if refused is not None:  # counted as /v1/messages would route it: only where it passes as is
            candidates = native_only(candidates, refused, NativeRequest.of("messages", raw, {}))
        if state.limits is not None:  # the key's allowed models and rpm bind counting too
            ctx.model = request.model
            state.limits.check(ctx)
            await state.limits.count_request(ctx)
        tokens, method = await _count(state, candidates, request, ctx.key_name, exact=refused is None)
    except ClientGone:
        return
    except GatewayError as exc:
        await _send_error(send, exc, headers)
        return
    body: dict[str, Any] = {"input_tokens": tokens}
    await _send_json(send, 200, orjson.dumps(body), {**headers, "x-gateway-token-count": method})


async def _count(
    state: AppState, candidates: tuple[Endpoint, ...], request: ChatRequest, key_name: str | None, *, exact: bool = True
) -> tuple[int, str]:
    """Exact from an endpoint this key and request may reach (the router's own filters: the
    prompt goes upstream to be counted); else, and when it fails, the local estimate. Not `exact`:
    a chat view with parts held as text (`carried`), which only the estimate counts."""
    assert state.router is not None  # build_state always makes one
    router, body = state.router, request.body
    features = router.features("chat", body, key_name, prefs=request.prefs, hash_chain=False)
    endpoint, ruled_out = counting_endpoint(candidates, features, router.shared.snapshot()) if exact else (None, ())
    method = COUNT_METHOD
    if ruled_out:
        method += "; " + ", ".join(f"endpoint {x.endpoint.id} ruled out ({x.reason})" for x in ruled_out)
    if endpoint is not None:
        try:
            tokens = await count_prompt(state.client, state.dispatcher.timeouts, endpoint, body)
            return tokens, EXACT_METHOD.format(endpoint.id)
        except ProviderError as exc:
            log.info("count_tokens: endpoint %s could not count (%s); estimating", endpoint.id, exc)
            method += f"; endpoint {endpoint.id} could not count ({type(exc).__name__})"
    return await asyncio.to_thread(router.counter.count_chat, body["messages"], body.get("tools")), method


messages = MessagesEndpoint()
count_tokens = CountTokensEndpoint()

fast_routes: dict[str, ASGIApp] = {"/v1/messages": messages, "/v1/messages/count_tokens": count_tokens}
routes = [
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
