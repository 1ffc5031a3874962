"""A passed-through Responses stream: the events that carry the response get the gateway's id, model
and store; the others pass as the same bytes; a broken stream's error event numbers on from them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from gateway.pipeline.context import RequestContext
from gateway.pipeline.outcome import Streaming
from gateway.pipeline.responses import Turn
from gateway.pipeline.responses_native import NativeEvents, relay
from gateway.state_store.memory import MemoryStore
from gateway.state_store.responses import ResponseStore
from gateway.translate.responses_request import translate
from kernel.errors import ProviderError, ProviderServerError, ProviderStreamError
from providers.base import ParsedChunk
from providers.http_mock import MockResponse
from tests.fakes.catalog import make_endpoint


def _raw(kind: str, seq: int, **fields: object) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": seq, **fields})
    return f"event: {kind}\ndata: {data}\n\n".encode()


async def test_events_carrying_the_response_are_the_gateways_and_the_rest_pass_untouched() -> None:
    request = translate({"model": "public", "input": "hi", "store": False})
    turn = Turn(request, "resp_gw", 1, "public", [], None)
    events = NativeEvents(RequestContext(request_id="r", op="chat", started=0.0), turn, "ep")
    created = await events.own(_raw("response.created", 0, response={"id": "resp_up", "model": "up", "store": False}))
    name, data = created.decode().split("\n")[:2]
    assert name == "event: response.created"
    assert json.loads(data.removeprefix("data: "))["response"] == {
        "id": "resp_gw",
        "model": "public",
        "store": False,
        "previous_response_id": None,
    }
    delta = _raw("response.output_text.delta", 1, item_id="msg_up", delta="Hi")
    assert await events.own(delta) is delta
    completed = await events.own(_raw("response.completed", 2, response={"id": "resp_up", "output": []}))
    assert b'"resp_gw"' in completed and events.response is not None and events.response["id"] == "resp_gw"
    error = json.loads(events.error("server_error", "boom", "server_error").split(b"data: ")[1])
    assert error["sequence_number"] == 3 and error["error"]["message"] == "boom"


@pytest.mark.parametrize("seq", ["abc", {}, [1], True, -1, 1.5])
async def test_a_malformed_sequence_number_is_an_upstream_stream_error(seq: object) -> None:
    request = translate({"model": "public", "input": "hi"})
    events = NativeEvents(RequestContext(request_id="r", op="chat", started=0.0), Turn(request, "resp_gw", 1, "public", [], None), "ep")
    with pytest.raises(ProviderStreamError, match="sequence_number"):
        await events.own(_raw("response.created", 0, response={"id": "resp_up"}).replace(b'"sequence_number": 0', b'"sequence_number": ' + json.dumps(seq).encode()))


@pytest.mark.parametrize("data", [b"{not json", b"[1]"])
async def test_an_unreadable_event_carrying_the_response_is_an_upstream_stream_error(data: bytes) -> None:
    request = translate({"model": "public", "input": "hi"})
    events = NativeEvents(RequestContext(request_id="r", op="chat", started=0.0), Turn(request, "resp_gw", 1, "public", [], None), "ep")
    with pytest.raises(ProviderStreamError):
        await events.own(b"event: response.created\ndata: " + data + b"\n\n")


async def test_a_passed_through_response_failed_is_relayed_but_is_a_failed_attempt_and_not_stored() -> None:
    # The SDK raises on response.failed itself: the client gets it as it came; the gateway keeps
    # nothing and tells its observers (breaker, health, the record) the attempt failed.
    store = ResponseStore(MemoryStore(), ttl_s=60.0, max_bytes=1 << 20)
    turn = Turn(translate({"model": "public", "input": "hi"}), "resp_gw", 1, "public", [], store)
    ctx = RequestContext(request_id="r", op="chat", started=0.0, stream=True)
    failed = _raw("response.failed", 1, response={"id": "resp_up", "status": "failed", "error": {"code": "server_error", "message": "boom"}})
    rest = [ParsedChunk([failed], done=True)]

    async def events() -> AsyncIterator[ParsedChunk]:
        for chunk in rest:
            yield chunk

    created = _raw("response.created", 0, response={"id": "resp_up"})
    streaming = Streaming(make_endpoint("a/m"), [created], events(), False, MockResponse(), native=True)  # type: ignore[arg-type]
    failures: list[ProviderError] = []
    out = b"".join([part async for part in relay(ctx, turn, streaming, error_event=lambda exc, ev: b"ERROR", on_failure=failures.append, on_finish=lambda c: None)])
    assert b"event: response.failed" in out and b'"resp_gw"' in out and b"ERROR" not in out
    assert [type(f) for f in failures] == [ProviderServerError] and "boom" in str(failures[0])
    assert ctx.status == 502 and ctx.error == "ProviderServerError"
    assert await store.get(None, "resp_gw") is None
