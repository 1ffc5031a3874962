"""The official `anthropic` SDK through the real gateway against the real SmolLM2 engine: one short
answer and one short stream, with the usage the engine reports; count_tokens, counted by the
engine's own tokenizer and chat template, equals the prompt tokens the engine reports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.engine.conftest import KEY, MODEL, Gateway

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The bundled engine with `native: [messages]`: llama-server's own /v1/messages, passed through."""
    gw = Gateway(tmp_path_factory.mktemp("engine-native"), native=["messages"])
    try:
        yield gw.wait_ready()
    finally:
        gw.close()


def test_messages_passed_through_to_llama_servers_own_messages_api(native: Gateway) -> None:
    with anthropic.Anthropic(base_url=native.url, api_key=KEY, max_retries=0, timeout=60) as client:
        whole = client.messages.create(model=MODEL, max_tokens=6, messages=[{"role": "user", "content": "Write a story."}])
        # Greedy (this SDK's stream() takes no temperature), so the same first token each run: a
        # sampled one that is part of a character (an emoji) makes the engine leave out
        # message_start, its id and its count; the next test takes that path on purpose.
        with client.messages.stream(
            model=MODEL, max_tokens=8, extra_body={"temperature": 0}, system="You are brief.", messages=[{"role": "user", "content": "Say hello."}]
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    # llama.cpp's own ids: the engine's answer, not the gateway's translation of a chat completion.
    assert whole.id.startswith("chatcmpl-") and final.id.startswith("chatcmpl-")
    assert whole.stop_reason == "max_tokens" and whole.usage.output_tokens == 6
    assert text and final.content[0].text == text  # type: ignore[union-attr]
    assert 0 < final.usage.output_tokens <= 8
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 10


def test_a_passed_through_stream_the_engine_opens_without_message_start_still_reassembles(native: Gateway) -> None:
    # Greedy, SmolLM2 Q4_1 opens this answer with an emoji whose first token is not a whole
    # character: llama-server then sends no message_start (measured straight from the engine).
    with anthropic.Anthropic(base_url=native.url, api_key=KEY, max_retries=0, timeout=60) as client:
        with client.messages.stream(
            model=MODEL, max_tokens=8, extra_body={"temperature": 0}, messages=[{"role": "user", "content": "Send me a smiley emoji."}]
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert text and ord(text[0]) > 0xFFFF  # the opening the engine sent no message_start for
    assert final.id.startswith("msg_")  # the gateway's opening, not llama.cpp's chatcmpl- id
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert 0 < final.usage.output_tokens <= 8  # the engine's own count, from its message_delta
    assert final.usage.input_tokens > 5  # the gateway's estimate of the prompt, not 0


def test_messages_create_and_stream_on_the_bundled_engine(gateway: Gateway) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=60) as client:
        cut = client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Write a long story."}])
        assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 4
        assert cut.id.startswith("msg_")  # translated from a chat completion (the gateway's id)
        assert cut.content[0].type == "text" and cut.content[0].text
        with client.messages.stream(
            model=MODEL, max_tokens=12, system="You are brief.", messages=[{"role": "user", "content": "Say hello."}]
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert text and final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert 0 < final.usage.output_tokens <= 12
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 10  # the engine's own count


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
SHAPES: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Say hello."}]},
    {
        "system": "You are brief.",
        "messages": [
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "Hello Ada."},
            {"role": "user", "content": [{"type": "text", "text": "What is my name?"}]},
        ],
    },
    {"tools": [WEATHER], "messages": [{"role": "user", "content": "Weather in Paris?"}]},
    # A forced call: the engine is sent the template's call opener as a prefill, counted too.
    {"tools": [WEATHER], "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": "Weather in Paris?"}]},
]


@pytest.mark.parametrize("shape", SHAPES, ids=["plain", "system-and-turns", "tools", "forced-tool"])
def test_count_tokens_equals_the_prompt_the_engine_reports(gateway: Gateway, shape: dict[str, Any]) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=60) as client:
        raw = client.messages.with_raw_response.count_tokens(model=MODEL, **shape)
        counted = raw.parse().input_tokens
        answer = client.messages.create(model=MODEL, max_tokens=1, **shape)
    assert raw.headers["x-gateway-token-count"].startswith("exact; counted by endpoint ")
    # The engine's prompt_tokens, which Anthropic's usage splits into fresh and cached input.
    assert counted == answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0) > 0
