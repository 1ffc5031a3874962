"""The SSE relay: payloads out as `data:` events, [DONE] only on a clean end, an error event otherwise."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from gateway.http.errors import error_event
from gateway.pipeline.context import RequestContext
from gateway.pipeline.outcome import Streaming
from gateway.pipeline.stream import DONE, relay
from kernel.errors import GatewayError, ProviderError, ProviderStreamError, ProviderTimeout
from kernel.values import Usage
from providers.base import ParsedChunk
from providers.http_mock import MockResponse
from tests.fakes.catalog import make_endpoint

EP = make_endpoint("a/m")


class Recorder:
    def __init__(self) -> None:
        self.failures: list[ProviderError] = []
        self.finished: list[RequestContext] = []
        self.rest_closed = False


def streaming(
    first: list[bytes], rest: list[ParsedChunk | BaseException], done: bool, recorder: Recorder
) -> tuple[Streaming, MockResponse]:
    response = MockResponse()

    async def events() -> AsyncIterator[ParsedChunk]:
        try:
            for item in rest:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            recorder.rest_closed = True

    return Streaming(EP, first, events(), done, response), response  # type: ignore[arg-type]


async def run(s: Streaming, recorder: Recorder, ctx: RequestContext) -> list[bytes]:
    return [
        part
        async for part in relay(
            ctx, s, error_event=error_event, on_failure=recorder.failures.append, on_finish=recorder.finished.append
        )
    ]


def context() -> RequestContext:
    return RequestContext(request_id="r", op="chat", started=0.0, stream=True)


async def test_clean_stream_ends_with_done() -> None:
    rec, ctx = Recorder(), context()
    s, response = streaming(
        [b'{"n":1}'],
        [ParsedChunk([b'{"n":2}', b'{"n":3}']), ParsedChunk(usage=Usage(1, 2, 0)), ParsedChunk(done=True)],
        False,
        rec,
    )

    out = await run(s, rec, ctx)

    # Events that arrived in one upstream read leave in one write.
    assert out == [b'data: {"n":1}\n\n', b'data: {"n":2}\n\ndata: {"n":3}\n\n', DONE]
    assert ctx.usage == Usage(1, 2, 0)
    assert rec.failures == [] and rec.finished == [ctx]
    assert ctx.status == 200
    assert response.closed and rec.rest_closed


async def test_done_already_in_the_first_events() -> None:
    rec, ctx = Recorder(), context()
    s, _ = streaming([b'{"n":1}'], [], True, rec)
    assert await run(s, rec, ctx) == [b'data: {"n":1}\n\n' + DONE]


async def test_upstream_closing_without_done_is_an_error_event() -> None:
    rec, ctx = Recorder(), context()
    s, response = streaming([b'{"n":1}'], [ParsedChunk([b'{"n":2}'])], False, rec)

    out = await run(s, rec, ctx)

    assert DONE not in out
    assert out[:2] == [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n']
    error = orjson.loads(out[2].removeprefix(b"data: "))
    assert error["error"]["code"] == "upstream_stream_error" and error["error"]["type"] == "api_error"
    assert error["error"]["message"] == "The upstream provider's stream broke off."  # a/m is the log's business
    assert len(out) == 3
    assert [type(e) for e in rec.failures] == [ProviderStreamError]
    assert (ctx.status, ctx.error) == (502, "ProviderStreamError")
    assert rec.finished == [ctx] and response.closed


async def test_timeout_mid_stream() -> None:
    rec, ctx = Recorder(), context()
    s, _ = streaming(
        [b"{}"], [ProviderTimeout("upstream a/m timed out waiting for the next chunk", endpoint="a/m")], False, rec
    )

    out = await run(s, rec, ctx)

    assert orjson.loads(out[-1].removeprefix(b"data: "))["error"]["code"] == "upstream_timeout"
    assert ctx.status == 504
    assert DONE not in out


async def test_client_going_away_closes_the_upstream() -> None:
    rec, ctx = Recorder(), context()
    s, response = streaming([b"{}"], [ParsedChunk([b"{}"])] * 10 + [ParsedChunk(done=True)], False, rec)
    gen = relay(ctx, s, error_event=error_event, on_failure=rec.failures.append, on_finish=rec.finished.append)

    assert await gen.__anext__() == b"data: {}\n\n"  # from the first events
    assert await gen.__anext__() == b"data: {}\n\n"  # from the rest: the upstream stream is live
    await gen.aclose()

    assert response.closed and rec.rest_closed
    assert rec.failures == []  # not the endpoint's fault
    assert rec.finished == [ctx]


def test_error_event_shape() -> None:
    event = error_event(GatewayError("boom", code="x"))
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert orjson.loads(event[6:]) == {"error": {"message": "boom", "type": "api_error", "param": None, "code": "x"}}


async def test_parse_stream_sends_the_first_event_alone_then_merges_each_read_and_keeps_events_before_a_failure() -> None:
    from gateway.pipeline.dispatch import parse_stream
    from providers.base import Target
    from providers.http_mock import _Bound
    from providers.openai_compat import OpenAIStreamTranslator

    target = Target(endpoint_id="ep", base_url="http://x", upstream_model="up", public_model="pub")
    one_read = b'data: {"usage":{"prompt_tokens":3}}\n\ndata: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\n'
    second_read = b'data: {"n":4}\n\ndata: {"error":{"message":"boom"}}\n\ndata: {"n":5}\n\n'
    response = _Bound(MockResponse(chunks=[one_read, second_read]))
    chunks = parse_stream(response, OpenAIStreamTranslator(target, strip_usage=True))

    # The first payload leaves at once (time to first token), with what came before it.
    first = await chunks.__anext__()
    assert first.payloads == [b'{"n":1}']
    assert first.usage is not None and first.usage.prompt_tokens == 3
    rest_of_read = await chunks.__anext__()
    assert rest_of_read.payloads == [b'{"n":2}', b'{"n":3}']
    before_failure = await chunks.__anext__()
    assert before_failure.payloads == [b'{"n":4}']
    with pytest.raises(ProviderStreamError, match="boom"):
        await chunks.__anext__()


async def test_a_stream_event_nested_deeper_than_it_can_be_written_back_breaks_the_stream() -> None:
    from gateway.pipeline.dispatch import parse_stream
    from providers.base import Target
    from providers.http_mock import _Bound
    from providers.openai_compat import OpenAIStreamTranslator

    target = Target(endpoint_id="ep", base_url="http://x", upstream_model="up", public_model="pub")
    deep = b'data: {"n":2,"x":' + b"[" * 300 + b"]" * 300 + b"}\n\n"
    response = _Bound(MockResponse(chunks=[b'data: {"n":1}\n\n', deep]))
    chunks = parse_stream(response, OpenAIStreamTranslator(target, strip_usage=True), "ep")
    assert (await chunks.__anext__()).payloads == [b'{"n":1}']
    with pytest.raises(ProviderStreamError, match="ep sent a stream event nested too deep"):
        await chunks.__anext__()


@pytest.mark.parametrize("reads", [
    [b'data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n'],
    [b'data: {"n":1}\n\n', b'data: {"n":2}\n\ndata: [DONE]\n\n'],
    [b': keep-alive\n\ndata: {"n":1}\n\nevent: x\ndata: {"n":2}\n\n'],
    [b'data: {"n":1}\r\n\r\ndata: {"n":2}\r\n\r\n'],
    [b'data: {"n":1}\n', b'\ndata: {"n":2}\n\n'],
])
def test_decoding_the_first_event_alone_yields_the_same_events(reads: list[bytes]) -> None:
    from gateway.pipeline.dispatch import _decoded
    from providers.sse import SSEDecoder

    plain, split = SSEDecoder(), SSEDecoder()
    expected = [event for raw in reads for event in plain.feed(raw)]
    got = [event for i, raw in enumerate(reads) for event in _decoded(split, raw, first_pending=i == 0)]
    assert got == expected and got
