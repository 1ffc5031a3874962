"""The OpenAI-compatible API. Handlers stay thin: they run the pipeline stages in order.

authenticate -> read + validate -> resolve -> route -> dispatch -> respond/stream -> account
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

import orjson

from gateway.errors import GatewayError, PayloadTooLarge
from gateway.http.errors import error_event, error_response
from gateway.pipeline.context import RequestContext
from gateway.pipeline.dispatch import Completed
from gateway.pipeline.resolve import resolve
from gateway.pipeline.stream import relay
from gateway.pipeline.validate import parse_json, validate
from gateway.state import AppState
from providers.base import Operation

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


async def read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"The request body is {length} bytes; the limit is {limit} bytes.")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"The request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


async def serve_inference(request: Request, op: Operation) -> Response:
    state: AppState = request.state.gw
    clock = state.clock
    ctx = RequestContext(request_id=request.scope["gateway.request_id"], op=op, started=clock())
    if state.accountant.keep_bodies:
        ctx.response_parts = []
    try:
        ctx.key_name = state.auth.authenticate(request.headers.get("authorization"))
        body = validate(op, parse_json(await read_body(request, state.settings.server.max_body_bytes)))
        ctx.body, ctx.model, ctx.stream = body, body["model"], bool(body.get("stream"))
        candidates = resolve(state.catalog, op, ctx.model, body)
        assert state.router is not None  # build_state always makes one
        ordering = await state.router.route(ctx, candidates)
        result = await state.dispatcher.dispatch(ctx, ordering)
    except GatewayError as exc:
        ctx.status, ctx.error = exc.status_code, type(exc).__name__
        state.accountant.record(ctx)
        return error_response(exc, ctx.response_headers(clock()))
    if isinstance(result, Completed):
        headers = ctx.response_headers(clock())
        if ctx.response_parts is not None:
            ctx.response_parts.append(result.body)
        state.accountant.record(ctx)
        return Response(result.body, media_type="application/json", headers=headers)
    headers = ctx.response_headers(clock())
    headers.update(SSE_HEADERS)
    endpoint_id = result.endpoint.id

    def on_failure(exc: GatewayError) -> None:
        state.breaker.record(endpoint_id, False, clock(), getattr(exc, "retry_after", None))

    stream = relay(ctx, result, error_event=error_event, on_failure=on_failure, on_finish=state.accountant.record)
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def chat_completions(request: Request) -> Response:
    return await serve_inference(request, "chat")


async def completions(request: Request) -> Response:
    return await serve_inference(request, "completions")


async def embeddings(request: Request) -> Response:
    return await serve_inference(request, "embeddings")


def _model_card(model: str, created: int) -> dict[str, object]:
    return {"id": model, "object": "model", "created": created, "owned_by": "llm-gateway"}


async def list_models(request: Request) -> Response:
    state: AppState = request.state.gw
    headers = {"x-request-id": request.scope["gateway.request_id"]}
    try:
        state.auth.authenticate(request.headers.get("authorization"))
    except GatewayError as exc:
        return error_response(exc, headers)
    data = [_model_card(m, state.catalog.created) for m in state.catalog.models()]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json", headers=headers)


async def get_model(request: Request) -> Response:
    state: AppState = request.state.gw
    headers = {"x-request-id": request.scope["gateway.request_id"]}
    model = request.path_params["model"]
    try:
        state.auth.authenticate(request.headers.get("authorization"))
        state.catalog.candidates(model)
    except GatewayError as exc:
        return error_response(exc, headers)
    return Response(orjson.dumps(_model_card(model, state.catalog.created)), media_type="application/json", headers=headers)


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/embeddings", embeddings, methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", get_model, methods=["GET"]),
]
