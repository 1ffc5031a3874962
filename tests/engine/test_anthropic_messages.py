"""The official `anthropic` SDK through the real gateway against the real SmolLM2 engine: one short
answer and one short stream, with the usage the engine reports."""

from __future__ import annotations

import anthropic
import pytest

from tests.engine.conftest import KEY, MODEL, Gateway

pytestmark = pytest.mark.engine


def test_messages_create_and_stream_on_the_bundled_engine(gateway: Gateway) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=60) as client:
        cut = client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Write a long story."}])
        assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 4
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
