"""A passed-through Responses stream: the events that carry the response get the gateway's id, model
and store; the others pass as the same bytes; a broken stream's error event numbers on from them."""

from __future__ import annotations

import json

import pytest

from gateway.pipeline.context import RequestContext
from gateway.pipeline.responses import Turn
from gateway.pipeline.responses_native import NativeEvents
from gateway.translate.responses_request import translate
from kernel.errors import ProviderStreamError


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
