"""llama-cpp-python's server, normalised: content, limits, tool-call deltas, errors; and `n` fanned out."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from gateway.config import BreakerConfig, Capabilities, EngineConfig, RetryConfig
from gateway.engines import engine_endpoints
from gateway.errors import AllAttemptsFailed, ProviderConnectError, ProviderRejected, ProviderServerError, Unavailable
from gateway.pipeline.context import RequestContext
from gateway.pipeline.dispatch import Completed, Dispatcher, Streaming
from gateway.routing.breaker import CircuitBreaker
from gateway.routing.order import Ordering
from providers.base import Target, UpstreamRequest, Usage
from providers.engines import Replica
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
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def sent(body: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    return orjson.loads(ADAPTER.build_request(TARGET, "chat", body, stream).body)


def test_null_content_becomes_empty_string() -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
    ]
    body = {"model": "smollm2-135m", "messages": messages}
    snapshot = copy.deepcopy(body)

    out = sent(body)

    assert out["messages"][1] == {"role": "assistant", "content": "", "tool_calls": [CALL]}
    assert out["messages"][0] == messages[0] and out["messages"][2] == messages[2]
    assert out["model"] == "smollm2"
    assert body == snapshot


def test_messages_with_content_are_untouched() -> None:
    # (Was: an assistant turn *without* `content` passed untouched. The real server answers 500
    # to a missing `content` as well, so that case is now normalised: see the next test.)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [CALL]}]
    assert sent({"model": "m", "messages": messages})["messages"] == messages


def test_missing_assistant_content_becomes_empty_string() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [CALL]}]
    body = {"model": "m", "messages": messages}
    snapshot = copy.deepcopy(body)

    out = sent(body)

    assert out["messages"] == [messages[0], {"role": "assistant", "tool_calls": [CALL], "content": ""}]
    assert body == snapshot


def test_base_behaviour_is_kept() -> None:
    out = sent(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "provider": {}, "stream": True}, stream=True
    )
    assert "provider" not in out
    assert out["stream_options"] == {"include_usage": True}


def delta(tool_calls: list[dict[str, Any]], index: int = 0) -> bytes:
    return orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "smollm2",
            "choices": [{"index": index, "delta": {"tool_calls": tool_calls}, "finish_reason": None}],
        }
    )


def repeated(call_index: int, fragment: str, name: str = "get_weather", call_id: str = "call_1") -> dict[str, Any]:
    return {"index": call_index, "id": call_id, "type": "function", "function": {"name": name, "arguments": fragment}}


def calls(payloads: list[bytes]) -> list[dict[str, Any]]:
    (payload,) = payloads
    return orjson.loads(payload)["choices"][0]["delta"]["tool_calls"]


def test_repeated_id_and_name_are_removed_after_the_first_delta() -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", {"stream": True})

    first = calls(translator.feed(None, delta([repeated(0, '{"ci')])).payloads)
    second = calls(translator.feed(None, delta([repeated(0, 'ty": "Paris"}')])).payloads)

    assert first == [repeated(0, '{"ci')]
    assert second == [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]


def test_each_call_and_each_choice_keeps_its_own_first_delta() -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", {"stream": True})
    translator.feed(None, delta([repeated(0, "{")]))

    second_call = calls(translator.feed(None, delta([repeated(1, "{", name="get_time", call_id="call_2")])).payloads)
    other_choice = calls(translator.feed(None, delta([repeated(0, "{")], index=1)).payloads)
    again = calls(translator.feed(None, delta([repeated(1, "}", name="get_time", call_id="call_2")])).payloads)

    assert second_call == [repeated(1, "{", name="get_time", call_id="call_2")]
    assert other_choice == [repeated(0, "{")]
    assert again == [{"index": 1, "function": {"arguments": "}"}}]


def test_the_model_is_the_public_name_in_chunks() -> None:
    translator = ADAPTER.stream_translator(TARGET, "chat", {"stream": True})
    assert orjson.loads(translator.feed(None, delta([repeated(0, "{")])).payloads[0])["model"] == "smollm2-135m"


# -- max_completion_tokens ------------------------------------------------------------


def test_max_completion_tokens_is_sent_as_max_tokens() -> None:
    out = sent({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 7})
    assert out["max_tokens"] == 7 and "max_completion_tokens" not in out


def test_with_both_limits_the_smaller_one_wins() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert sent(base | {"max_completion_tokens": 7, "max_tokens": 3})["max_tokens"] == 3
    assert sent(base | {"max_completion_tokens": 2, "max_tokens": 3})["max_tokens"] == 2
    assert sent(base | {"max_tokens": 3}) == base | {"model": "smollm2", "max_tokens": 3} | SAMPLERS_OFF


# -- the engine's extra samplers ---------------------------------------------------------

SAMPLERS_OFF = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}


def test_the_engine_samplers_are_off_so_temperature_means_what_openai_means() -> None:
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 1.0}
    assert {k: sent(base)[k] for k in SAMPLERS_OFF} == SAMPLERS_OFF
    mine = sent(base | {"top_k": 5, "repeat_penalty": 1.3})  # a client that sets them keeps them
    assert (mine["top_k"], mine["repeat_penalty"], mine["min_p"]) == (5, 1.3, 0.0)


# -- the deprecated function_call beside tool_calls -------------------------------------

# A non-streamed forced tool call exactly as llama-cpp-python 0.3.36 answers it.
RAW_TOOL_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "/models/SmolLM2-135M-Instruct.Q4_1.gguf",
    "choices": [
        {
            "index": 0,
            "message": {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call__0_get_weather_cmpl-1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{ "city": "Paris" }'},
                    }
                ],
                "role": "assistant",
                "function_call": {"name": "get_weather:", "arguments": '{ "city": "Paris" }'},
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 11, "total_tokens": 31},
}


def test_non_streamed_function_call_is_dropped_beside_tool_calls() -> None:
    parsed = ADAPTER.parse_response(TARGET, "chat", orjson.dumps(RAW_TOOL_ANSWER))
    message = orjson.loads(parsed.body)["choices"][0]["message"]

    assert "function_call" not in message
    assert message["tool_calls"] == RAW_TOOL_ANSWER["choices"][0]["message"]["tool_calls"]  # type: ignore[index]
    assert orjson.loads(parsed.body)["model"] == "smollm2-135m"
    assert parsed.usage is not None and parsed.usage.completion_tokens == 11


def test_a_plain_answer_is_untouched() -> None:
    answer = copy.deepcopy(RAW_TOOL_ANSWER)
    answer["choices"][0]["message"] = {"role": "assistant", "content": "hello"}  # type: ignore[index]
    answer["choices"][0]["finish_reason"] = "stop"  # type: ignore[index]
    body = orjson.loads(ADAPTER.parse_response(TARGET, "chat", orjson.dumps(answer)).body)
    assert body["choices"] == answer["choices"]


def llama_tool_stream(fragments: list[str], name: str = "get_weather", call_id: str = "call__0_x") -> list[bytes]:
    """A streamed forced tool call, chunk for chunk as llama-cpp-python 0.3.36 sends it."""
    head = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 2, "model": "x"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return orjson.dumps(head | {"choices": [{"index": 0, "finish_reason": finish, "logprobs": None, "delta": delta}]})

    events = [chunk({"role": "assistant", "content": None, "function_call": None, "tool_calls": None})]
    for fragment in fragments:
        call = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": fragment}}
        events.append(
            chunk({"role": None, "content": None, "function_call": {"name": name, "arguments": fragment}, "tool_calls": [call]})
        )
    events.append(chunk({"role": None, "content": None, "function_call": None, "tool_calls": None}, "tool_calls"))
    return events


def translate(events: list[bytes], body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    translator = ADAPTER.stream_translator(TARGET, "chat", body or {"stream": True})
    out = []
    for event in [*events, b"[DONE]"]:
        out.extend(orjson.loads(p) for p in translator.feed(None, event).payloads)
    return out


def test_streamed_deltas_lose_function_call_and_null_fields() -> None:
    chunks = translate(llama_tool_stream(['{"city"', ': "Paris"}']))
    deltas = [c["choices"][0]["delta"] for c in chunks]

    assert deltas[0] == {"role": "assistant", "content": None}
    assert deltas[1] == {
        "content": None,
        "tool_calls": [{"index": 0, "id": "call__0_x", "type": "function", "function": {"name": "get_weather", "arguments": '{"city"'}}],
    }
    assert deltas[2] == {"content": None, "tool_calls": [{"index": 0, "function": {"arguments": ': "Paris"}'}}]}
    assert deltas[3] == {"content": None}
    assert chunks[3]["choices"][0]["finish_reason"] == "tool_calls"


def test_plain_text_deltas_are_untouched() -> None:
    event = orjson.dumps(
        {"id": "c", "object": "chat.completion.chunk", "model": "x",
         "choices": [{"index": 0, "delta": {"content": "Hi"}, "logprobs": None, "finish_reason": None}]}
    )
    (chunk,) = translate([event])
    assert chunk["choices"][0]["delta"] == {"content": "Hi"}


def test_the_sdk_stream_helper_sees_one_call_with_the_right_name() -> None:
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    fragments = ['{ "', "city", '": "', "Paris", '" }']
    state = ChatCompletionStreamState(input_tools=[WEATHER_TOOL])
    for chunk in translate(llama_tool_stream(fragments)):
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    message = state.get_final_completion().choices[0].message

    assert message.function_call is None
    (call,) = message.tool_calls or []
    assert call.function.name == "get_weather" and call.id == "call__0_x"
    assert orjson.loads(call.function.arguments) == {"city": "Paris"}


WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


# -- errors: no traceback or file path reaches the client ------------------------------

# The real server's answer to {"max_tokens": "abc", "temperature": "x"} (0.3.36), paths included.
VALIDATION_500 = orjson.dumps(
    {
        "error": {
            "message": "2 validation errors:\n  {'type': 'int_parsing', 'loc': ('body', 'max_tokens'), 'msg': 'Input"
            " should be a valid integer, unable to parse string as an integer', 'input': 'abc'}\n  {'type': "
            "'float_parsing', 'loc': ('body', 'temperature'), 'msg': 'Input should be a valid number, unable to "
            "parse string as a number', 'input': 'x'}\n\n  File \"/work/main/.venv/lib/python3.11/site-packages/"
            "llama_cpp/server/app.py\", line 376, in create_chat_completion\n    POST /v1/chat/completions",
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }
)


def assert_clean(message: str) -> None:
    assert "Traceback" not in message and 'File "' not in message
    assert "/work/" not in message and "site-packages" not in message and ".py" not in message
    assert "\n" not in message


def test_a_validation_500_becomes_a_clean_400() -> None:
    err = ADAPTER.map_error(TARGET, 500, {}, VALIDATION_500)

    assert isinstance(err, ProviderRejected)
    assert err.status_code == 400 and not err.retryable and not err.fallback
    assert err.message.startswith("2 validation errors: {'type': 'int_parsing', 'loc': ('body', 'max_tokens')")
    assert "'temperature'" in err.message
    assert_clean(err.message)


def test_a_traceback_in_a_500_is_cut_and_paths_redacted() -> None:
    text = (
        "Model path does not exist: /opt/models/secret/model.gguf\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/llama_cpp/llama.py", line 1, in <module>\n'
        "ValueError: boom"
    )
    err = ADAPTER.map_error(TARGET, 500, {}, orjson.dumps({"error": {"message": text, "type": "internal_server_error"}}))

    assert isinstance(err, ProviderServerError) and err.retryable
    assert err.message == "upstream local/smollm2 returned 500: Model path does not exist: <path>"
    assert_clean(err.message)


def test_a_plain_text_500_is_sanitised_too() -> None:
    body = b'Internal error\nTraceback (most recent call last):\n  File "/srv/app.py", line 3\nKeyError: x'
    err = ADAPTER.map_error(TARGET, 500, {}, body)
    assert err.message == "upstream local/smollm2 returned 500: Internal error"


def test_an_empty_500_says_so() -> None:
    # tool_choice "required" trips an assert in the server: a 500 with an empty message.
    err = ADAPTER.map_error(TARGET, 500, {}, orjson.dumps({"error": {"message": "", "type": "internal_server_error"}}))
    assert isinstance(err, ProviderServerError)
    assert err.message == "upstream local/smollm2 returned 500: no details"


def test_other_statuses_keep_their_mapping() -> None:
    context = orjson.dumps({"error": {"message": "Requested tokens (5000) exceed context window of 4096", "type": "invalid_request_error"}})
    err = ADAPTER.map_error(TARGET, 400, {}, context)
    assert isinstance(err, ProviderRejected) and err.status_code == 400
    assert err.message == "Requested tokens (5000) exceed context window of 4096"
    assert isinstance(ADAPTER.map_error(TARGET, 503, {"retry-after": "2"}, b"busy"), ProviderServerError)


# -- n > 1: the engine ignores `n`, so dispatch fans out ----------------------------------


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
        CircuitBreaker(BreakerConfig(min_requests=100)),
        RETRY,
        Timeouts(connect=1, first_byte=1, between_chunks=1, total=5),
        clock=clock,
        rng=random.Random(1),
        sleep=clock.sleep,
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


# -- tool_choice "required" ------------------------------------------------------------------


def test_required_with_one_tool_names_that_tool() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER_TOOL], "tool_choice": "required"}
    assert sent(body)["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_required_among_several_tools_is_a_400_that_may_fall_back() -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER_TOOL, other], "tool_choice": "required"}

    with pytest.raises(ProviderRejected) as caught:
        sent(body)

    assert caught.value.status_code == 400 and caught.value.param == "tool_choice"
    assert caught.value.fallback and not caught.value.retryable and not caught.value.counts_against_endpoint


async def test_required_among_several_tools_falls_back_to_an_endpoint_that_supports_it() -> None:
    upstream = IgnoresN()
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    native = make_endpoint("b/m", base_url="http://b.test/v1")
    ctx = chat_context(tools=[WEATHER_TOOL, other], tool_choice="required")

    await dispatcher_for(upstream).dispatch(ctx, Ordering((LLAMA_A, native)))

    assert ctx.endpoint_id == "b/m" and len(upstream.bodies) == 1
    assert upstream.bodies[0]["tool_choice"] == "required"


async def test_required_among_several_tools_on_llama_only_is_a_400() -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    ctx = chat_context(tools=[WEATHER_TOOL, other], tool_choice="required")

    with pytest.raises(AllAttemptsFailed) as caught:
        await dispatcher_for(IgnoresN()).dispatch(ctx, Ordering((LLAMA_A,)))

    assert caught.value.status_code == 400 and "name the function in 'tool_choice'" in caught.value.message


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
        MockHTTPClient(dies), CircuitBreaker(BreakerConfig(min_requests=100)),
        RetryConfig(attempts_per_endpoint=3, max_attempts=6, backoff_base=0.0, backoff_max=0.0),
        Timeouts(connect=1, first_byte=1, between_chunks=1, total=5), clock=clock, rng=random.Random(1), sleep=clock.sleep,
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


def test_a_fastapi_422_keeps_its_detail() -> None:
    body = orjson.dumps({"detail": [{"loc": ["body"], "msg": "Field required", "type": "missing"}]})
    err = ADAPTER.map_error(TARGET, 422, {}, body)
    assert isinstance(err, ProviderRejected) and err.status_code == 422
    assert err.message == '[{"loc":["body"],"msg":"Field required","type":"missing"}]'
