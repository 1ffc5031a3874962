"""llama-server, normalised: OpenAI's sampling, named and forced tool choices, content; and `n` fanned out."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from gateway.engines import engine_endpoints
from gateway.pipeline.context import RequestContext
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.outcome import Completed, Streaming
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.breaker_feedback import BreakerFeedback
from gateway.routing.order import Ordering
from gateway.routing.settings import BreakerConfig, RetryConfig
from kernel.deployment import Capabilities
from kernel.errors import AllAttemptsFailed, ProviderConnectError, ProviderServerError, Unavailable
from kernel.values import Usage
from providers.base import Target, UpstreamRequest
from providers.engines import Replica
from providers.engines.config import EngineConfig
from providers.http import Timeouts
from providers.http_mock import MockHTTPClient, MockResponse
from providers.llamacpp import LlamaCppAdapter
from tests.fakes.catalog import make_endpoint
from tests.fakes.clock import FakeClock

TARGET = Target(
    endpoint_id="local/smollm2",
    base_url="http://127.0.0.1:8001/v1",
    upstream_model="smollm2",
    public_model="smollm2-135m",
)
ADAPTER = LlamaCppAdapter()
BUNDLED = LlamaCppAdapter(forced_call_prefix="<tool_call>\n")
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
HI = [{"role": "user", "content": "hi"}]


def sent(body: dict[str, Any], stream: bool = False, adapter: LlamaCppAdapter = ADAPTER, op: Any = "chat") -> dict[str, Any]:
    return orjson.loads(adapter.build_request(TARGET, op, {"model": "smollm2-135m", **body}, stream).body)


# -- sampling: OpenAI's defaults, not the engine's ---------------------------------------------


def test_unset_sampling_is_sent_as_openais_defaults() -> None:
    out = sent({"messages": HI})
    assert (out["temperature"], out["top_p"], out["top_k"], out["min_p"]) == (1.0, 1.0, 0, 0.0)
    assert out["model"] == "smollm2"


def test_sampling_the_request_sets_passes_through() -> None:
    out = sent({"messages": HI, "temperature": 0, "top_p": 0.5, "top_k": 40, "min_p": 0.1})
    assert (out["temperature"], out["top_p"], out["top_k"], out["min_p"]) == (0, 0.5, 40, 0.1)


def test_embeddings_are_sent_as_they_are() -> None:
    out = sent({"input": "hello"}, op="embeddings")
    assert out == {"model": "smollm2", "input": "hello"}


# -- content ---------------------------------------------------------------------------------


def test_an_assistant_turn_without_content_or_calls_gets_an_empty_string() -> None:
    messages = [*HI, {"role": "assistant"}, {"role": "assistant", "content": None}, {"role": "user", "content": "again"}]
    out = sent({"messages": messages})
    assert out["messages"][1] == {"role": "assistant", "content": ""}
    assert out["messages"][2] == {"role": "assistant", "content": ""}
    assert out["messages"][3] == messages[3]


def test_a_tool_call_turn_with_null_content_is_untouched() -> None:
    # llama-server accepts it (the SDK sends it back after a tool call).
    messages = [*HI, {"role": "assistant", "content": None, "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_1", "content": "21C"}]
    assert sent({"messages": messages})["messages"] == messages


# -- tool_choice ---------------------------------------------------------------------------


def test_a_named_tool_choice_is_required_among_that_tool_only() -> None:
    body = {"messages": HI, "tools": [WEATHER_TOOL, TIME_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    out = sent(body)
    assert out["tool_choice"] == "required" and out["tools"] == [TIME_TOOL]
    assert out["messages"] == HI  # no known call opener: nothing is prefilled


def test_a_named_tool_choice_that_names_no_tool_is_sent_as_it_is() -> None:
    choice = {"type": "function", "function": {"name": "nope"}}
    out = sent({"messages": HI, "tools": [WEATHER_TOOL], "tool_choice": choice})
    assert out["tool_choice"] == choice and out["tools"] == [WEATHER_TOOL]


def test_required_begins_the_answer_with_the_templates_call_opener() -> None:
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        out = sent({"messages": HI, "tools": [WEATHER_TOOL, TIME_TOOL], "tool_choice": choice}, adapter=BUNDLED)
        assert out["messages"] == [*HI, {"role": "assistant", "content": "<tool_call>\n"}]
        assert out["tool_choice"] == "required"


def test_auto_none_and_a_final_assistant_turn_are_not_prefilled() -> None:
    for extra in ({"tool_choice": "auto"}, {}, {"tool_choice": "none"}):
        assert sent({"messages": HI, "tools": [WEATHER_TOOL], **extra}, adapter=BUNDLED)["messages"] == HI
    continued = [*HI, {"role": "assistant", "content": "Sure"}]
    assert sent({"messages": continued, "tools": [WEATHER_TOOL], "tool_choice": "required"}, adapter=BUNDLED)["messages"] == continued
    assert sent({"messages": HI, "tool_choice": "required"}, adapter=BUNDLED)["messages"] == HI  # no tools


def test_each_request_closes_its_connection() -> None:
    # llama-server drops connections idle for 5 s; a pooled one reused just then fails the request.
    assert ADAPTER.build_request(TARGET, "chat", {"model": "m", "messages": HI}, True).headers["connection"] == "close"


def test_streams_always_ask_for_usage() -> None:
    assert sent({"messages": HI}, stream=True)["stream_options"] == {"include_usage": True}


# -- tool-call ids: OpenAI's `call_` form ------------------------------------------------------

ENGINE_ID = "Xq3Zk0b7TnVwLr9aPc2Ms5Hd8Jf1Ge4U"  # what llama-server's gen_tool_call_id makes: 32 random alnum


def test_tool_call_ids_of_an_answer_get_openais_call_prefix() -> None:
    calls = [{**CALL, "id": ENGINE_ID}, {**CALL, "id": "call_kept"}, {**CALL, "id": ""}]
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": calls}}]}
    got = orjson.loads(ADAPTER.parse_response(TARGET, "chat", orjson.dumps(body)).body)
    assert [c["id"] for c in got["choices"][0]["message"]["tool_calls"]] == [f"call_{ENGINE_ID}", "call_kept", ""]


def test_tool_call_ids_of_a_stream_get_the_same_prefix_in_every_chunk() -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", {"stream": True})
    first = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": ENGINE_ID, "type": "function",
                                                               "function": {"name": "get_weather", "arguments": ""}}]}}]}
    later = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}
    chunks = [orjson.loads(translator.feed(None, orjson.dumps(c)).payloads[0]) for c in (first, later)]
    assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["id"] == f"call_{ENGINE_ID}"
    assert "id" not in chunks[1]["choices"][0]["delta"]["tool_calls"][0]


# -- parallel_tool_calls: false, which llama-server's grammar does not hold to ------------------

SINGLE = {"tools": [{"type": "function", "function": {"name": "get_weather"}}], "parallel_tool_calls": False}


def test_an_answer_to_a_single_call_request_keeps_only_the_first_call() -> None:
    calls = [{**CALL, "id": "call_a"}, {**CALL, "id": "call_b"}, {**CALL, "id": "call_c"}]
    body = {"choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "tool_calls": calls}}]}
    got = orjson.loads(ADAPTER.parse_response(TARGET, "chat", orjson.dumps(body), request=SINGLE).body)
    choice = got["choices"][0]
    assert [c["id"] for c in choice["message"]["tool_calls"]] == ["call_a"]
    assert choice["finish_reason"] == "tool_calls"
    # Parallel calls allowed (or not said): every call stays, and the engine's finish reason.
    for request in ({**SINGLE, "parallel_tool_calls": True}, {"tools": SINGLE["tools"]}, None):
        kept = orjson.loads(ADAPTER.parse_response(TARGET, "chat", orjson.dumps(body), request=request).body)
        assert len(kept["choices"][0]["message"]["tool_calls"]) == 3 and kept["choices"][0]["finish_reason"] == "length"


def _call_delta(index: int, **function: str) -> dict[str, object]:
    return {"index": index, "function": function}


def test_a_stream_for_a_single_call_drops_later_calls_and_ends_as_tool_calls() -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", {"stream": True, **SINGLE})
    chunks = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [{**_call_delta(0, name="get_weather", arguments=""), "id": "x1"}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [_call_delta(0, arguments='{"city": "Paris"}')]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{**_call_delta(1, name="get_weather", arguments=""), "id": "x2"}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [_call_delta(1, arguments='{"ci')]}, "finish_reason": "length"}]},
    ]
    out = [orjson.loads(translator.feed(None, orjson.dumps(c)).payloads[0])["choices"][0] for c in chunks]
    indexes = [call["index"] for ch in out for call in ch["delta"].get("tool_calls", [])]
    assert indexes == [0, 0]
    assert out[0]["delta"]["tool_calls"][0]["id"] == "call_x1"
    assert out[-1]["finish_reason"] == "tool_calls"


def test_a_single_call_cut_by_max_tokens_still_ends_as_length() -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", {"stream": True, **SINGLE})
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [_call_delta(0, arguments='{"ci')]}, "finish_reason": "length"}]}
    assert orjson.loads(translator.feed(None, orjson.dumps(chunk)).payloads[0])["choices"][0]["finish_reason"] == "length"
    parallel = ADAPTER.stream_translator(TARGET, "chat", {"stream": True, "tools": SINGLE["tools"]})
    later = {"choices": [{"index": 0, "delta": {"tool_calls": [_call_delta(1, arguments="{}")]}, "finish_reason": "length"}]}
    got = orjson.loads(parallel.feed(None, orjson.dumps(later)).payloads[0])["choices"][0]
    assert got["delta"]["tool_calls"][0]["index"] == 1 and got["finish_reason"] == "length"


def test_answers_without_tool_calls_are_left_alone() -> None:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}, "junk"], "id": "chatcmpl-1"}
    got = orjson.loads(ADAPTER.parse_response(TARGET, "chat", orjson.dumps(body)).body)
    assert got["choices"] == body["choices"] and got["id"] == "chatcmpl-1"


def test_the_bundled_engine_gets_the_prefilling_adapter() -> None:
    class Supervisor:
        replicas = [Replica(0, 9001, "http://127.0.0.1:9001/v1", "smollm2-135m-instruct")]

        def is_ready(self, index: int) -> bool:
            return True

    (bundled,) = engine_endpoints(EngineConfig(), Supervisor())
    (own,) = engine_endpoints(EngineConfig(model="/m/x.gguf"), Supervisor())
    assert isinstance(bundled.adapter, LlamaCppAdapter) and bundled.adapter.forced_call_prefix == "<tool_call>\n"
    assert isinstance(own.adapter, LlamaCppAdapter) and own.adapter.forced_call_prefix is None

# -- n > 1: the engine caps `n` at its slot count, so dispatch fans out ----------------------------------


class IgnoresN:
    """A llama.cpp-like upstream: one choice whatever `n` says; streams carry no usage."""

    def __init__(self, *, stream_usage: bool = False, fail_on: set[int] | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.stream_usage = stream_usage
        self.fail_on = fail_on or set()

    def __call__(self, request: UpstreamRequest) -> MockResponse:
        body = orjson.loads(request.body)
        self.bodies.append(body)
        k = len(self.bodies)
        if k in self.fail_on:
            return MockResponse(500, {}, orjson.dumps({"error": {"message": "boom", "type": "internal_server_error"}}))
        if not body.get("stream"):
            answer = {
                "id": f"chatcmpl-{k}",
                "object": "chat.completion",
                "created": k,
                "model": "/models/x.gguf",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": f"answer {k}"}, "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": k, "total_tokens": 10 + k},
            }
            return MockResponse(200, {"content-type": "application/json"}, orjson.dumps(answer))
        head = {"id": f"chatcmpl-{k}", "object": "chat.completion.chunk", "created": k, "model": "/models/x.gguf"}
        events = [
            head | {"choices": [{"index": 0, "delta": {"role": "assistant"}, "logprobs": None, "finish_reason": None}]},
            head | {"choices": [{"index": 0, "delta": {"content": f"answer {k}"}, "logprobs": None, "finish_reason": None}]},
            head | {"choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]},
        ]
        if self.stream_usage:
            events.append(head | {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": k, "total_tokens": 10 + k}})
        chunks = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        return MockResponse(200, {"content-type": "text/event-stream"}, chunks=chunks)


LLAMA_A = make_endpoint("a/m", base_url="http://a.test/v1", capabilities={"native_n": False}, adapter=LlamaCppAdapter())
LLAMA_B = make_endpoint("b/m", base_url="http://b.test/v1", capabilities={"native_n": False}, adapter=LlamaCppAdapter())
RETRY = RetryConfig(attempts_per_endpoint=1, max_attempts=4, backoff_base=0.0, backoff_max=0.0)


def dispatcher_for(handler: Callable[[UpstreamRequest], MockResponse]) -> Dispatcher:
    clock = FakeClock()
    return Dispatcher(
        MockHTTPClient(handler),
        RETRY,
        Timeouts(connect=1, first_byte=1, between_chunks=1, total=5),
        clock=clock,
        rng=random.Random(1),
        sleep=clock.sleep,
        observer=BreakerFeedback(CircuitBreaker(BreakerConfig(min_requests=100))),
    )


def chat_context(stream: bool = False, **body: Any) -> RequestContext:
    ctx = RequestContext(request_id="req", op="chat", started=0.0)
    ctx.body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream, **body}
    ctx.model, ctx.stream = "m", stream
    return ctx


async def collect(streaming: Streaming) -> tuple[list[dict[str, Any]], bool]:
    """The client payloads of a committed stream, and whether it ended with [DONE]."""
    payloads = list(streaming.first)
    done = streaming.done
    if not done:
        async for chunk in streaming.rest:
            payloads.extend(chunk.payloads)
            if chunk.done:
                done = True
                break
    await streaming.rest.aclose()  # type: ignore[attr-defined]
    return [orjson.loads(p) for p in payloads], done


async def test_non_streamed_n_is_fanned_out_and_merged() -> None:
    upstream = IgnoresN()
    ctx = chat_context(n=3, seed=7)

    result = await dispatcher_for(upstream).dispatch(ctx, Ordering((LLAMA_A,)))

    assert isinstance(result, Completed)
    body = orjson.loads(result.body)
    assert [(c["index"], c["message"]["content"]) for c in body["choices"]] == [(0, "answer 1"), (1, "answer 2"), (2, "answer 3")]
    assert body["id"] == "chatcmpl-1" and body["model"] == "m"
    assert body["usage"] == {"prompt_tokens": 30, "completion_tokens": 6, "total_tokens": 36}
    assert ctx.usage == Usage(prompt_tokens=30, completion_tokens=6)
    assert ["n" in b for b in upstream.bodies] == [False, False, False]
    assert [b["seed"] for b in upstream.bodies] == [7, 8, 9]  # n samples, not one sample n times
    assert ctx.attempts == 1


async def test_an_endpoint_that_honours_n_gets_one_request() -> None:
    upstream = IgnoresN()
    native = make_endpoint("a/m", base_url="http://a.test/v1", adapter=LlamaCppAdapter())
    ctx = chat_context(n=2)

    await dispatcher_for(upstream).dispatch(ctx, Ordering((native,)))

    assert len(upstream.bodies) == 1 and upstream.bodies[0]["n"] == 2


async def test_n_1_is_one_plain_request() -> None:
    upstream = IgnoresN()
    await dispatcher_for(upstream).dispatch(chat_context(n=1), Ordering((LLAMA_A,)))
    assert len(upstream.bodies) == 1 and upstream.bodies[0]["n"] == 1


async def test_a_failed_part_fails_the_attempt_and_falls_back_as_a_whole() -> None:
    upstream = IgnoresN(fail_on={2})  # A's second part fails; B then answers all three
    ctx = chat_context(n=3)

    result = await dispatcher_for(upstream).dispatch(ctx, Ordering((LLAMA_A, LLAMA_B)))

    assert isinstance(result, Completed)
    assert len(orjson.loads(result.body)["choices"]) == 3
    assert ctx.endpoint_id == "b/m" and ctx.attempts == 2
    assert len(upstream.bodies) == 2 + 3


async def test_streamed_n_is_fanned_out_and_reindexed() -> None:
    upstream = IgnoresN()
    ctx = chat_context(stream=True, n=2)

    result = await dispatcher_for(upstream).dispatch(ctx, Ordering((LLAMA_A,)))

    assert isinstance(result, Streaming)
    chunks, done = await collect(result)
    assert done
    assert {c["id"] for c in chunks} == {"chatcmpl-1"}
    text = {i: "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"][0]["index"] == i) for i in (0, 1)}
    assert text == {0: "answer 1", 1: "answer 2"}
    finishes = [(c["choices"][0]["index"], c["choices"][0]["finish_reason"]) for c in chunks if c["choices"][0]["finish_reason"]]
    assert finishes == [(0, "stop"), (1, "stop")]
    assert ctx.usage is None  # the engine reports no stream usage, and none is invented
    assert len(upstream.bodies) == 2 and all("n" not in b for b in upstream.bodies)


async def test_streamed_usage_is_summed_into_one_chunk_when_asked() -> None:
    upstream = IgnoresN(stream_usage=True)
    ctx = chat_context(stream=True, n=2, stream_options={"include_usage": True})

    result = await dispatcher_for(upstream).dispatch(ctx, Ordering((LLAMA_A,)))

    assert isinstance(result, Streaming)
    chunks, done = await collect(result)
    usage_chunks = [c for c in chunks if "usage" in c]
    assert done and len(usage_chunks) == 1 and usage_chunks[-1] is chunks[-1]
    assert usage_chunks[0]["choices"] == [] and usage_chunks[0]["id"] == "chatcmpl-1"
    assert usage_chunks[0]["usage"] == {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}
    assert ctx.usage == Usage(prompt_tokens=20, completion_tokens=3)


async def test_streamed_usage_not_asked_for_is_counted_but_not_sent() -> None:
    upstream = IgnoresN(stream_usage=True)
    ctx = chat_context(stream=True, n=2)

    result = await dispatcher_for(upstream).dispatch(ctx, Ordering((LLAMA_A,)))

    assert isinstance(result, Streaming)
    chunks, _ = await collect(result)
    assert not any("usage" in c for c in chunks)
    assert ctx.usage == Usage(prompt_tokens=20, completion_tokens=3)


async def test_a_later_part_failing_mid_stream_is_an_error_not_a_clean_end() -> None:
    upstream = IgnoresN(fail_on={2})
    ctx = chat_context(stream=True, n=2)

    result = await dispatcher_for(upstream).dispatch(ctx, Ordering((LLAMA_A, LLAMA_B)))

    assert isinstance(result, Streaming) and ctx.endpoint_id == "a/m"  # committed on part 0
    seen: list[bytes] = list(result.first)
    with pytest.raises(ProviderServerError, match="returned 500: boom"):
        async for chunk in result.rest:
            seen.extend(chunk.payloads)
            assert not chunk.done
    assert {orjson.loads(p)["choices"][0]["index"] for p in seen} == {0}


def test_llamacpp_engine_endpoints_declare_that_they_ignore_n() -> None:
    class Supervisor:
        replicas = [Replica(0, 9001, "http://127.0.0.1:9001/v1", "smollm2-135m-instruct")]

        def is_ready(self, index: int) -> bool:
            return True

    (llama,) = engine_endpoints(EngineConfig(), Supervisor())
    (vllm,) = engine_endpoints(EngineConfig(kind="vllm", model="org/model"), Supervisor())

    assert llama.deployment.capabilities.native_n is False
    assert isinstance(llama.adapter, LlamaCppAdapter)
    assert vllm.deployment.capabilities.native_n is True
    assert Capabilities().native_n is True


# -- a replica that dies mid-request: 503, not a retry into a restarting engine ----------------


async def test_a_replica_that_died_meanwhile_gets_a_503_saying_so() -> None:
    state = {"ready": True}
    replica = make_endpoint("local-0", base_url="http://a.test/v1", adapter=LlamaCppAdapter(), ready=lambda: state["ready"])
    calls: list[str] = []

    def dies(request: UpstreamRequest) -> MockResponse:
        calls.append(request.url)
        state["ready"] = False  # the supervisor saw the process exit and is restarting it
        raise ProviderConnectError("cannot reach upstream local-0: connection refused", endpoint="local-0")

    ctx = chat_context()
    with pytest.raises(Unavailable) as caught:
        await dispatcher_for(dies).dispatch(ctx, Ordering((replica,)))

    assert not isinstance(caught.value, AllAttemptsFailed) and caught.value.status_code == 503
    assert "starting or restarting" in caught.value.message and caught.value.headers == {"retry-after": "1"}
    assert len(calls) == 1


async def test_a_dead_replica_is_not_retried_even_when_retries_remain() -> None:
    state = {"ready": True}
    replica = make_endpoint("local-0", base_url="http://a.test/v1", adapter=LlamaCppAdapter(), ready=lambda: state["ready"])
    calls: list[str] = []

    def dies(request: UpstreamRequest) -> MockResponse:
        calls.append(request.url)
        state["ready"] = False
        raise ProviderConnectError("connection refused", endpoint="local-0")

    clock = FakeClock()
    dispatcher = Dispatcher(
        MockHTTPClient(dies),
        RetryConfig(attempts_per_endpoint=3, max_attempts=6, backoff_base=0.0, backoff_max=0.0),
        Timeouts(connect=1, first_byte=1, between_chunks=1, total=5), clock=clock, rng=random.Random(1), sleep=clock.sleep,
        observer=BreakerFeedback(CircuitBreaker(BreakerConfig(min_requests=100))),
    )
    with pytest.raises(Unavailable):
        await dispatcher.dispatch(chat_context(), Ordering((replica,)))
    assert len(calls) == 1


async def test_a_failure_on_a_live_replica_is_still_retried_and_reported_as_before() -> None:
    replica = make_endpoint("local-0", base_url="http://a.test/v1", adapter=LlamaCppAdapter(), ready=lambda: True)

    def refuses(request: UpstreamRequest) -> MockResponse:
        raise ProviderConnectError("connection refused", endpoint="local-0")

    with pytest.raises(AllAttemptsFailed) as caught:
        await dispatcher_for(refuses).dispatch(chat_context(), Ordering((replica,)))
    assert caught.value.status_code == 502



# -- prompt counting (POST /apply-template, then POST /tokenize) ---------------------------


def test_counting_renders_the_template_then_tokenizes_the_prompt() -> None:
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER_TOOL]}
    first = ADAPTER.count_step(TARGET, body, 0, None)
    assert isinstance(first, UpstreamRequest)
    assert (first.method, first.url) == ("POST", "http://127.0.0.1:8001/apply-template")
    sent = orjson.loads(first.body)
    # The body as a chat request would send it: the engine's model name, the tools, OpenAI's sampling.
    assert sent["model"] == "smollm2" and sent["tools"] == [WEATHER_TOOL] and sent["messages"] == body["messages"]
    assert sent["temperature"] == 1.0
    second = ADAPTER.count_step(TARGET, body, 1, orjson.dumps({"prompt": "<|im_start|>user\nhi<|im_end|>\n"}))
    assert isinstance(second, UpstreamRequest)
    assert second.url == "http://127.0.0.1:8001/tokenize"
    assert orjson.loads(second.body) == {
        "content": "<|im_start|>user\nhi<|im_end|>\n",
        "add_special": True,
        "parse_special": True,
    }
    assert ADAPTER.count_step(TARGET, body, 2, orjson.dumps({"tokens": [1, 2, 3, 4, 5]})) == 5


def test_counting_a_forced_call_counts_the_prefill_the_engine_would_see() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER_TOOL], "tool_choice": "required"}
    first = BUNDLED.count_step(TARGET, body, 0, None)
    assert isinstance(first, UpstreamRequest)
    assert orjson.loads(first.body)["messages"][-1] == {"role": "assistant", "content": "<tool_call>\n"}


@pytest.mark.parametrize("answer", [b"", b"not json", b"[]", b'{"prompt": 7}', b'{"other": "x"}'])
def test_a_count_answer_without_its_field_is_a_server_error(answer: bytes) -> None:
    with pytest.raises(ProviderServerError, match="prompt"):
        ADAPTER.count_step(TARGET, {"messages": []}, 1, answer)
    with pytest.raises(ProviderServerError, match="tokens"):
        ADAPTER.count_step(TARGET, {"messages": []}, 2, answer.replace(b"prompt", b"tokens"))


# -- Messages, passed through to llama-server's own /v1/messages ---------------------------------


def test_a_messages_request_goes_to_llama_servers_own_route_as_the_client_sent_it() -> None:
    body = {"model": "smollm2-135m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}],
            "top_k": 5, "metadata": {"user_id": "u1"}}
    request = ADAPTER.build_native(TARGET, "messages", body, True, {"anthropic-beta": "b1", "x-api-key": "sk-client"})
    assert request.method == "POST" and request.url == "http://127.0.0.1:8001/v1/messages" and request.stream
    sent = orjson.loads(request.body)
    # The client's fields as they were (its top_k kept); only the model and the unset sampling change.
    assert sent == {**body, "model": "smollm2", "stream": True, "temperature": 1.0, "top_p": 1.0, "min_p": 0.0}
    assert request.headers["connection"] == "close" and request.headers["anthropic-beta"] == "b1"
    assert "x-api-key" not in request.headers and "authorization" not in request.headers  # never the client's key


def test_a_passed_through_message_is_parsed_for_its_usage_only() -> None:
    message = {"id": "chatcmpl-x", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "Hi"}],
               "usage": {"input_tokens": 1, "cache_read_input_tokens": 31, "output_tokens": 2}}
    raw = orjson.dumps(message)
    parsed = ADAPTER.parse_native(TARGET, "messages", raw)
    assert parsed.body == raw  # byte for byte
    assert parsed.usage is not None and parsed.usage.prompt_tokens == 32 and parsed.usage.cached_tokens == 31
    assert parsed.usage.completion_tokens == 2


def _events(stream: Any, events: list[dict[str, Any]]) -> list[bytes]:
    return [p for e in events for p in stream.feed(e["type"], orjson.dumps(e)).payloads]


def test_a_passed_through_stream_without_message_start_gets_one_first() -> None:
    # llama-server leaves it out when its first token is part of a character (an emoji): an SDK
    # then has nothing to add the deltas to.
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
    stream = ADAPTER.native_stream(TARGET, "messages", prompt_hint=21)
    out = _events(stream, [block, delta])
    assert len(out) == 3 and out[0].startswith(b"event: message_start\ndata: ")
    start = orjson.loads(out[0].split(b"data: ", 1)[1])
    assert start["message"]["id"].startswith("msg_") and start["message"]["content"] == []
    assert out[1].startswith(b"event: content_block_start") and out[2].startswith(b"event: content_block_delta")
    assert start["message"]["usage"] == {"input_tokens": 21, "output_tokens": 0}  # the gateway's estimate, for the client
    # The opening is the gateway's, not the engine's count: the usage counts the output only.
    end = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}
    usage = stream.feed("message_delta", orjson.dumps(end)).usage
    assert usage is not None and not usage.prompt_reported and usage.completion_tokens == 2
    begun = {"type": "message_start", "message": {"id": "chatcmpl-1", "type": "message", "role": "assistant",
                                                  "content": [], "usage": {"input_tokens": 3, "output_tokens": 0}}}
    kept = _events(ADAPTER.native_stream(TARGET, "messages"), [begun, block, delta])
    assert len(kept) == 3 and b"chatcmpl-1" in kept[0]  # a stream that has one is left as it is


@pytest.mark.parametrize("arguments", ["{", "", "not json", '{"city": "Paris"'])
def test_history_with_tool_call_arguments_the_engine_cannot_parse_is_refused_before_it_is_sent(arguments: str) -> None:
    # llama-server parses every earlier call's arguments as JSON to render its template, and answers
    # a 500 otherwise: retried, a 502, and counted against the engine's breaker for a client's input.
    from kernel.errors import ProviderRejected

    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    body = {"model": "m", "messages": [{"role": "user", "content": "Weather?"},
                                       {"role": "assistant", "content": None, "tool_calls": [call]},
                                       {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}]}
    with pytest.raises(ProviderRejected) as refused:
        ADAPTER.build_request(TARGET, "chat", body, False)
    assert refused.value.status_code == 400 and not refused.value.counts_against_endpoint
    assert "messages[1].tool_calls[0].function.arguments" in refused.value.client_message()
    fine = {**call, "function": {**call["function"], "arguments": '{"city": "Paris"}'}}
    body["messages"][1] = {**body["messages"][1], "tool_calls": [fine]}
    ADAPTER.build_request(TARGET, "chat", body, False)  # valid JSON goes as it is
