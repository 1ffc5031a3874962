"""The pass-through stage: which attempts take the client's body as is, and what goes with it."""

from __future__ import annotations

import json

from gateway.catalog import endpoints_from_settings
from gateway.config import load_config
from gateway.pipeline import native
from gateway.pipeline.context import NativeRequest, RequestContext

BODY = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "provider": {"order": ["b"]}}


def endpoints():  # type: ignore[no-untyped-def]
    settings = load_config(
        providers=[
            {"name": "a", "kind": "anthropic", "base_url": "https://a.test/v1"},
            {"name": "b", "kind": "openai", "base_url": "https://b.test/v1"},
        ],
        deployments=[
            {"model": "m", "provider": "a", "upstream_model": "claude-up", "native": ["messages"]},
            {"model": "m", "provider": "a", "id": "a/translated"},
            {"model": "m", "provider": "b"},
        ],
    )
    return endpoints_from_settings(settings)


def test_only_deployments_that_list_the_clients_api_take_it_as_is() -> None:
    taking, translated, chat = endpoints()
    ctx = RequestContext(request_id="r", op="chat", started=0.0, api="messages")
    assert not any(native.takes(ctx, ep) for ep in (taking, translated, chat))  # no native request: translate
    ctx.native = NativeRequest.of("messages", BODY, {"anthropic-beta": "b1"})
    assert [native.takes(ctx, ep) for ep in (taking, translated, chat)] == [True, False, False]


def test_the_gateways_own_fields_stay_behind() -> None:
    taking = endpoints()[0]
    ctx = RequestContext(request_id="r", op="chat", started=0.0, api="messages", stream=True)
    ctx.native = NativeRequest.of("messages", BODY, {"anthropic-beta": "b1"})
    request = native.request(ctx, taking)
    assert json.loads(request.body) == {"model": "claude-up", "max_tokens": 8, "messages": BODY["messages"], "stream": True}
    assert request.headers["anthropic-beta"] == "b1" and request.stream


def test_passthrough_framing_adds_nothing() -> None:
    events = [b"event: ping\ndata: {}\n\n", b"event: message_stop\ndata: {}\n\n"]
    assert native.PASSTHROUGH.frame(events) == b"".join(events) and native.PASSTHROUGH.end() == b""


def _llama():  # type: ignore[no-untyped-def]
    settings = load_config(
        providers=[{"name": "l", "kind": "llamacpp", "base_url": "http://127.0.0.1:9/v1"}],
        deployments=[{"model": "m", "provider": "l", "native": ["messages"]}],
    )
    return endpoints_from_settings(settings)[0]


def test_an_adapter_may_decline_a_body_that_is_then_translated() -> None:
    # llama-server ignores disable_parallel_tool_use: only the translation keeps its answer to one call.
    llama = _llama()
    ctx = RequestContext(request_id="r", op="chat", started=0.0, api="messages")
    tools = {"tools": [{"name": "f", "input_schema": {"type": "object"}}]}
    ctx.native = NativeRequest.of("messages", {**BODY, **tools, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, {})
    assert not native.takes(ctx, llama) and not native.passes(ctx.native, llama)
    ctx.native = NativeRequest.of("messages", {**BODY, **tools, "tool_choice": {"type": "auto", "disable_parallel_tool_use": False}}, {})
    assert native.takes(ctx, llama)
