"""Embeddings, legacy completions, models, health: through the SDK and on the wire."""

from __future__ import annotations

import base64
import struct

import httpx
import openai
import pytest

from tests.e2e.conftest import GATEWAY_KEY, SDK
from tests.fakes.openai_upstream import COMPLETION_TEXT, FakeOpenAIUpstream, embedding_for
from tests.fakes.servers import GatewayServer

AUTH = {"authorization": f"Bearer {GATEWAY_KEY}"}


# -- embeddings ----------------------------------------------------------------------------


async def test_embeddings_sdk_default_base64(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    resp = await sdk.call("embeddings.create", model="embed-model", input=["first text", "second text"])

    assert resp.model == "embed-model"
    assert [d.index for d in resp.data] == [0, 1]
    assert resp.data[0].embedding == pytest.approx(embedding_for("first text"))
    assert resp.data[1].embedding == pytest.approx(embedding_for("second text"))
    assert resp.usage.prompt_tokens == 4
    seen = upstream.requests_for("embed-upstream")[0].body
    assert seen["encoding_format"] == "base64"  # the SDK asks for base64 and decodes it itself


async def test_embeddings_float_and_dimensions(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    resp = await sdk.call(
        "embeddings.create", model="embed-model", input="hello", encoding_format="float", dimensions=4
    )

    assert resp.data[0].embedding == pytest.approx(embedding_for("hello", 4))
    seen = upstream.requests_for("embed-upstream")[0].body
    assert (seen["encoding_format"], seen["dimensions"], seen["model"]) == ("float", 4, "embed-upstream")


async def test_embeddings_base64_on_the_wire(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(
            gateway.url + "/embeddings",
            json={"model": "embed-model", "input": "hello", "encoding_format": "base64"},
            headers=AUTH,
        )
    assert resp.status_code == 200
    encoded = resp.json()["data"][0]["embedding"]
    assert isinstance(encoded, str)
    assert list(struct.unpack("<8f", base64.b64decode(encoded))) == pytest.approx(embedding_for("hello"))


async def test_embeddings_cannot_stream(sdk: SDK) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.call("embeddings.create", model="embed-model", input="x", extra_body={"stream": True})
    assert info.value.param == "stream"


# -- legacy completions ----------------------------------------------------------------------


async def test_completion(sdk: SDK, upstream: FakeOpenAIUpstream) -> None:
    resp = await sdk.call("completions.create", model="chat-model", prompt="Tell a story", max_tokens=16)

    assert resp.object == "text_completion"
    assert resp.model == "chat-model"
    assert resp.choices[0].text == "".join(COMPLETION_TEXT)
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.completion_tokens == len(COMPLETION_TEXT)
    seen = upstream.requests_for("gpt-fake")[0]
    assert seen.path == "/v1/completions"
    assert seen.body["prompt"] == "Tell a story"


async def test_completion_with_logprobs(sdk: SDK) -> None:
    resp = await sdk.call("completions.create", model="chat-model", prompt="Tell a story", logprobs=3, echo=True)

    choice = resp.choices[0]
    assert choice.text == "Tell a story" + "".join(COMPLETION_TEXT)
    assert choice.logprobs.tokens == COMPLETION_TEXT
    assert len(choice.logprobs.token_logprobs) == len(COMPLETION_TEXT)
    assert all(len(top) == 3 for top in choice.logprobs.top_logprobs)
    assert choice.logprobs.text_offset[0] == len("Tell a story")


async def test_completion_streaming(sdk: SDK) -> None:
    stream = await sdk.call("completions.create", model="chat-model", prompt="Tell a story", stream=True)
    chunks = await sdk.collect(stream)

    assert "".join(c.choices[0].text for c in chunks) == "".join(COMPLETION_TEXT)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None and c.model == "chat-model" for c in chunks)


async def test_completion_streaming_with_usage(sdk: SDK) -> None:
    stream = await sdk.call(
        "completions.create",
        model="chat-model",
        prompt="Tell a story",
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = await sdk.collect(stream)

    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == len(COMPLETION_TEXT)


async def test_completion_missing_prompt(sdk: SDK) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.call("post", "/completions", body={"model": "chat-model"}, cast_to=object)
    assert info.value.param == "prompt"


# -- models ------------------------------------------------------------------------------------


async def test_models_list(sdk: SDK) -> None:
    page = await sdk.call("models.list")
    ids = [m.id for m in page.data]

    assert ids == sorted(ids)
    assert {"chat-model", "org/slash-model", "embed-model", "fallback-500"} <= set(ids)
    assert len(ids) == len(set(ids))  # one entry per public model, however many deployments
    assert all(m.object == "model" and m.owned_by == "llm-gateway" for m in page.data)


@pytest.mark.parametrize("model", ["chat-model", "org/slash-model"])
async def test_models_retrieve(sdk: SDK, model: str) -> None:
    card = await sdk.call("models.retrieve", model)
    assert card.id == model
    assert card.object == "model"


async def test_models_retrieve_unknown(sdk: SDK) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await sdk.call("models.retrieve", "org/no-such-model")
    assert info.value.code == "model_not_found"


# -- health ---------------------------------------------------------------------------------------


async def test_healthz_and_readyz(gateway: GatewayServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        live = await http.get(gateway.root + "/healthz")
        ready = await http.get(gateway.root + "/readyz")
    assert live.status_code == 200 and live.json() == {"status": "ok"}
    # The "unavailable" model's only endpoint is not ready, so the gateway is not ready.
    assert ready.status_code == 503
    assert ready.json()["models_without_endpoint"] == ["unavailable"]
    assert ready.json()["endpoints_not_ready"] == ["local/unavailable"]
